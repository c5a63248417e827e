package io.sparkhtap;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Alias$;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeSet;
import org.apache.spark.sql.catalyst.expressions.AttributeSet$;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.NumericEvalContext;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Average;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * A pushed subtree's aggregate split across the cluster (issue 30): one task per partition of
 * the subtree's largest table computes the aggregate over that partition's rows — every other
 * table read whole in each task, as a broadcast — and Spark merges the partial results as it
 * merges its own: SUM and COUNT as sums of the partial values, MIN and MAX of them, AVG from a
 * partial SUM and COUNT through Spark's own Average evaluation. Every task reads at the query's
 * one snapshot (the scan's seq and leases), so the merged answer is the one-task answer.
 *
 * <p>Exact because each row of the split table reaches exactly one task and no operator between
 * it and the aggregate looks at other rows of it: the table must be on the preserved side of every
 * join above it (inner, the left of LEFT / semi / anti / EXISTS joins, the right of RIGHT joins)
 * and under no limit, window, union or inner aggregate. A decimal SUM's partial value may exceed
 * the SUM's type; the reader then hands it over as several rows that fit (htap.pushdown.partials).
 *
 * <p>When: the cluster has task slots one task's cores lack ({@link JoinedTables#splitPays}, the
 * joined scans' cost rule), every other table is below spark.sql.autoBroadcastJoinThreshold, and
 * every aggregate is SUM, COUNT, MIN, MAX or AVG without DISTINCT or FILTER. {@link #CONF}: auto
 * (that rule), true (whenever the shape allows), false (never). Otherwise the subtree runs in one
 * task, as before, and EXPLAIN says why it was not split.
 */
final class SplitAggregate {
  static final String CONF = "spark.htap.splitSubtrees";

  /** What was decided for an aggregate: the plan that replaces it (null: not split), and why. */
  static final class Decision {
    final LogicalPlan plan;
    final String why;

    Decision(LogicalPlan plan, String why) {
      this.plan = plan;
      this.why = why;
    }
  }

  private static final Map<LogicalPlan, Decision> DECIDED = Collections.synchronizedMap(new WeakHashMap<>());
  /** The merging aggregates built here: planned by Spark as they are, never split or absorbed again. */
  private static final Set<LogicalPlan> BUILT = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

  private SplitAggregate() {}

  static boolean built(LogicalPlan p) {
    return BUILT.contains(p);
  }

  /** The aggregate at {@code p} or under its chain of sorts, limits, projections and filters (null: none). */
  static Aggregate below(LogicalPlan p) {
    while (p instanceof Sort || p instanceof GlobalLimit || p instanceof LocalLimit || p instanceof Project || p instanceof Filter) {
      p = p.children().head();
    }
    return p instanceof Aggregate && HtapSnapshotStrategy.hasHtapScan(p) ? (Aggregate) p : null;
  }

  /** The decision for {@code a}, made once per plan (EXPLAIN and AQE plan it again). */
  static Decision decide(Aggregate a) {
    Decision d = DECIDED.get(a);
    if (d == null) {
      try {
        d = attempt(a);
      } catch (Throwable t) {  // a bad setting is rethrown: the user must see it
        Fallbacks.record("split subtree aggregate", Integer.toHexString(a.semanticHash()), a, t);
        d = new Decision(null, "an error while splitting (logged)");
      }
      DECIDED.put(a, d);
    }
    return d;
  }

  /** For EXPLAIN of a one-task subtree: why its aggregate was not split ("" when it has none). */
  static String whyNot(LogicalPlan plan) {
    Aggregate a = below(plan);
    Decision d = a == null ? null : DECIDED.get(a);
    return d == null || d.plan != null ? "" : "; not split: " + d.why;
  }

  private static Decision no(String why) {
    return new Decision(null, why);
  }

  private static Decision attempt(Aggregate a) {
    String mode = JoinedTables.mode(CONF,
        "auto: split a pushed subtree's aggregate by the partitions of its largest table when the cluster's task slots make it pay");
    if (mode.equals("false")) return no(CONF + "=false");
    int[] cores = JoinedTables.cores();
    if (mode.equals("auto") && cores[0] <= cores[1]) {  // the cost rule's answer whatever the sizes (local mode)
      return no("splitting buys no parallelism one task lacks: " + cores[0] + " task slots, " + cores[1] + " cores for one task");
    }
    List<AggregateExpression> found = new ArrayList<>();
    for (NamedExpression ne : CollectionConverters.asJava(a.aggregateExpressions())) aggregatesIn((Expression) ne, found);
    Partials partials = new Partials();
    for (AggregateExpression ae : found) {
      String refused = partials.add(ae);
      if (refused != null) return no(refused);
    }
    // The partial aggregate: the grouping keys, then each function's partial values.
    List<NamedExpression> partialOut = new ArrayList<>();
    List<Expression> groups = CollectionConverters.asJava(a.groupingExpressions());
    List<Attribute> keys = new ArrayList<>();
    for (int i = 0; i < groups.size(); i++) {
      Expression g = groups.get(i);
      NamedExpression key = g instanceof Attribute ? (Attribute) g : alias(g, "_group" + i);
      partialOut.add(key);
      keys.add(key.toAttribute());
    }
    partialOut.addAll(partials.columns);
    Aggregate partial = new Aggregate(a.groupingExpressions(), CollectionConverters.asScala(partialOut).toList(), a.child(),
        Aggregate.apply$default$4());
    // The merging aggregate: the original's outputs (same ids) over the partial values.
    List<NamedExpression> merged = new ArrayList<>();
    @SuppressWarnings({"unchecked", "rawtypes"})
    AttributeSet available = AttributeSet$.MODULE$.apply((scala.collection.Iterable) partial.output());
    for (NamedExpression ne : CollectionConverters.asJava(a.aggregateExpressions())) {
      Expression m = ne instanceof Attribute ? (Expression) ne : merged((Expression) ne, groups, keys, partials, true);
      if (!m.references().subsetOf(available)) return no("an output refers to a column neither grouped nor aggregated: " + ne);
      merged.add((NamedExpression) m);
    }

    PlanTranslator t = new PlanTranslator();
    ObjectNode json = t.translate(partial);
    if (json == null || t.leaves.isEmpty() || !t.residuals.isEmpty()) return no("the subtree is not pushed whole");
    ObjectNode root = (ObjectNode) json.get("root");
    Set<Integer> rowwise = new HashSet<>();
    preserved(root.get("child"), rowwise);
    long threshold = SQLConf.get().autoBroadcastJoinThreshold();
    int best = -1;
    long bestBytes = -1;
    long total = 0;
    long[] bytes = new long[t.leaves.size()];
    for (int i = 0; i < t.leaves.size(); i++) {
      HtapScan s = (HtapScan) t.leaves.get(i).scan();
      bytes[i] = s.estimateStatistics().sizeInBytes().orElse(-1);
      if (bytes[i] < 0) return no(String.join(", ", s.tableNames()) + " has no size statistics");
      total += bytes[i];
      int k = t.leafScans.get(i);
      if (k >= 0 && rowwise.contains(k) && bytes[i] > bestBytes) {
        best = i;
        bestBytes = bytes[i];
      }
    }
    if (best < 0) {
      return no("no table can be split: each is on the null-supplying side of an outer join, under a limit, window,"
          + " union or inner aggregate, or read with more than its filters pushed into it");
    }
    HtapScan largest = (HtapScan) t.leaves.get(best).scan();
    String name = String.join(", ", largest.tableNames());
    for (int i = 0; i < t.leaves.size(); i++) {
      if (i != best && (threshold <= 0 || bytes[i] > threshold)) {
        return no(String.join(", ", ((HtapScan) t.leaves.get(i).scan()).tableNames()) + " reads about " + bytes[i]
            + " bytes, above spark.sql.autoBroadcastJoinThreshold=" + threshold + ", too large to read in every task");
      }
    }
    long parts = largest.partitions();
    if (parts == 1) return no("the largest table, " + name + ", has one partition");
    String why = "split by the partitions of " + name + " (largest, about " + bestBytes + " bytes; every other table read"
        + " whole in every task)";
    if (mode.equals("true")) {
      why += " (" + CONF + "=true)";
    } else {
      StringBuilder costs = new StringBuilder();
      if (!JoinedTables.splitPays(bestBytes, name, total - bestBytes, parts, costs)) {
        return no("splitting by the partitions of " + name + " buys no parallelism one task lacks; " + costs);
      }
      why += "; " + costs;
    }
    json.put("split", t.leafScans.get(best));
    root.put("partial", true);
    String pushed = Ir.text(json);
    String problem = PlanCheck.why(largest.catalogOptions(), pushed);
    if (problem != null) {
      Fallbacks.record("split subtree aggregate (plan check)", Integer.toHexString(a.semanticHash()), pushed,
          new IllegalStateException(problem));
      return no("the plan check refused the split plan");
    }
    List<AttributeReference> output = new ArrayList<>();
    StructType schema = new StructType();
    for (Attribute attr : CollectionConverters.asJava(partial.output())) {
      output.add((AttributeReference) attr);
      schema = schema.add(PlanTranslator.name(attr), attr.dataType(), true);
    }
    String how = "subtree aggregate split: " + String.join(", ", new java.util.LinkedHashSet<>(t.operators)) + " over "
        + t.leaves.size() + " scans, a partial aggregate per task, merged by Spark; " + why;
    DataSourceV2ScanRelation scan = HtapSubtreeStrategy.scanOf(t, pushed, output, schema, how);
    Aggregate merging = new Aggregate(CollectionConverters.asScala(new ArrayList<Expression>(keys)).toList(),
        CollectionConverters.asScala(merged).toList(), scan, Aggregate.apply$default$4());
    BUILT.add(merging);
    return new Decision(merging, why);
  }

  /** Each function's partial columns and the expression that merges them. */
  private static final class Partials {
    final List<NamedExpression> columns = new ArrayList<>();
    final List<AggregateExpression> functions = new ArrayList<>();
    final List<Expression> merges = new ArrayList<>();

    /** Null when added, else why the function cannot be split. */
    String add(AggregateExpression ae) {
      for (AggregateExpression f : functions) {
        if (f.semanticEquals(ae)) return null;
      }
      if (ae.isDistinct() || ae.filter().isDefined() || ae.mode() != Complete$.MODULE$) {
        return "a DISTINCT or FILTER aggregate: " + ae;
      }
      AggregateFunction f = ae.aggregateFunction();
      Expression merge;
      if (f instanceof Sum) {
        Sum sum = (Sum) f;
        merge = sumOf(partial(ae, "sum"), sum.dataType(), sum);
      } else if (f instanceof Count) {
        if (f.children().size() != 1) return "COUNT of several columns: " + ae;
        merge = countOf(partial(ae, "count"));
      } else if (f instanceof Min) {
        merge = function(new Min(partial(ae, "min")));
      } else if (f instanceof Max) {
        merge = function(new Max(partial(ae, "max")));
      } else if (f instanceof Average) {
        Average avg = (Average) f;
        Expression in = avg.child();
        boolean decimal = in.dataType() instanceof DecimalType;
        Sum sum = new Sum(decimal ? in : new Cast(in, DataTypes.DoubleType, scala.Option.empty()),
            NumericEvalContext.apply(avg.evalMode(), NumericEvalContext.apply$default$2()));
        if (!sum.dataType().equals(avg.sum().dataType())) return "an AVG whose sum Spark keeps in another type: " + ae;
        Expression total = sumOf(partial(function(sum), "avg_sum"), avg.sum().dataType(), sum);
        Expression count = countOf(partial(function(new Count(CollectionConverters.asScala(List.of(in)).toList())), "avg_count"));
        merge = avg.evaluateExpression().transformDown(new scala.runtime.AbstractPartialFunction<Expression, Expression>() {
          @Override
          public boolean isDefinedAt(Expression x) {
            return x.semanticEquals(avg.sum()) || x.semanticEquals(avg.count());
          }

          @Override
          public <A1 extends Expression, B1> B1 applyOrElse(A1 x, scala.Function1<A1, B1> fallback) {
            if (!isDefinedAt(x)) return fallback.apply(x);
            @SuppressWarnings("unchecked") B1 r = (B1) (x.semanticEquals(avg.sum()) ? total : count);
            return r;
          }
        });
      } else {
        return "an aggregate Spark merges in its own way: " + ae;
      }
      functions.add(ae);
      merges.add(merge);
      return null;
    }

    /** A partial column computing {@code ae} per task; its attribute. */
    private Attribute partial(AggregateExpression ae, String what) {
      Alias column = alias(ae, "_" + what + columns.size());
      columns.add(column);
      return column.toAttribute();
    }

    Expression mergeOf(AggregateExpression ae) {
      for (int i = 0; i < functions.size(); i++) {
        if (functions.get(i).semanticEquals(ae)) return merges.get(i);
      }
      throw new IllegalStateException("no partial for " + ae);
    }
  }

  /** SUM of partial sums, in the original SUM's type (and evaluation mode: ANSI overflow checks). */
  private static Expression sumOf(Attribute partials, DataType type, Sum like) {
    Expression sum = function(new Sum(partials, like.evalContext()));
    return sum.dataType().equals(type) ? sum : new Cast(sum, type, scala.Option.empty());
  }

  /** COUNT merged: the sum of partial counts, 0 where no task counted (a global aggregate of no task). */
  private static Expression countOf(Attribute partials) {
    return new Coalesce(CollectionConverters.asScala(List.<Expression>of(
        function(new Sum(partials)), Literal.create(0L, DataTypes.LongType))).toList());
  }

  private static AggregateExpression function(AggregateFunction f) {
    return f.toAggregateExpression(false, scala.Option.empty());
  }

  /**
   * {@code e} (an output of the original aggregate) over the partial columns: each aggregate
   * replaced by its merge, each grouping expression by its key column; an alias keeps its id.
   */
  private static Expression merged(Expression e, List<Expression> groups, List<Attribute> keys, Partials partials, boolean top) {
    if (e instanceof AggregateExpression) return partials.mergeOf((AggregateExpression) e);
    if (!top) {
      for (int i = 0; i < groups.size(); i++) {
        if (groups.get(i).semanticEquals(e)) return keys.get(i);
      }
    }
    List<Expression> children = new ArrayList<>();
    for (Expression c : CollectionConverters.asJava(e.children())) children.add(merged(c, groups, keys, partials, false));
    return e.withNewChildren(CollectionConverters.asScala(children).toList());
  }

  private static void aggregatesIn(Expression e, List<AggregateExpression> out) {
    if (e instanceof AggregateExpression) {
      out.add((AggregateExpression) e);
      return;
    }
    for (Expression c : CollectionConverters.asJava(e.children())) aggregatesIn(c, out);
  }

  private static Alias alias(Expression e, String name) {
    return new Alias(e, name, NamedExpression$.MODULE$.newExprId(), Alias$.MODULE$.apply$default$4(e, name),
        Alias$.MODULE$.apply$default$5(e, name), Alias$.MODULE$.apply$default$6(e, name));
  }

  /**
   * The scans under {@code node} whose every row reaches the aggregate through row-wise operators
   * alone (projections, filters, the preserved side of joins): splitting one of them by partitions
   * splits the aggregate's input rows, each into exactly one task.
   */
  private static void preserved(JsonNode node, Set<Integer> out) {
    switch (node.path("node").asText()) {
      case "scan":
        out.add(node.get("scan").asInt());
        return;
      case "project":
      case "filter":
        preserved(node.get("child"), out);
        return;
      case "join": {
        String type = node.get("type").asText();
        if (List.of("inner", "cross", "left", "semi", "anti", "existence").contains(type)) preserved(node.get("left"), out);
        if (List.of("inner", "cross", "right").contains(type)) preserved(node.get("right"), out);
        return;
      }
      default:  // an aggregate, limit, window, union, expand or sort would see one partition's rows only
    }
  }
}
