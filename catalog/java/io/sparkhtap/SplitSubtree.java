package io.sparkhtap;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
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
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * A pushed subtree split across the cluster (issue 30): tasks over the partitions of the
 * subtree's largest table (each a run of neighbouring partitions, at most twice the cluster's
 * task slots of them), every other table read whole in each task (as a broadcast) or, when joined to it
 * by its partition column, only by the task's key range (co-partitioned, {@link
 * Split#coPartitioned}), Spark merging what the tasks return. Two shapes: an aggregate — each
 * task returns a partial aggregate, merged as
 * Spark merges its own (SUM and COUNT as sums of the partial values, MIN and MAX of them, AVG from
 * a partial SUM and COUNT through Spark's own Average evaluation) — and an ORDER BY ... LIMIT n
 * (a top-N) — each task returns its n first rows, Spark sorts and limits them again. Every task
 * reads at the query's one snapshot (the scan's seq and leases), so the answer is the one-task
 * answer.
 *
 * <p>Exact because each row of the split table reaches exactly one task and no operator between
 * it and the split node looks at other rows of it: the table must be on the preserved side of
 * every join above it (inner, the left of LEFT / semi / anti / EXISTS joins, the right of RIGHT
 * joins) and under no limit, window, union or inner aggregate. A decimal SUM's partial value may
 * exceed the SUM's type; the reader then hands it over as several rows that fit
 * (htap.pushdown.partials).
 *
 * <p>When: the cluster has task slots one task's cores lack ({@link JoinedTables#splitPays}, the
 * joined scans' cost rule), every other table is co-partitioned or below
 * spark.sql.autoBroadcastJoinThreshold, and
 * every aggregate is SUM, COUNT, MIN, MAX or AVG without DISTINCT or FILTER. {@link #CONF}: auto
 * (that rule), true (whenever the shape allows), false (never). Otherwise the subtree runs in one
 * task, as before, and EXPLAIN says why it was not split.
 */
final class SplitSubtree {
  static final String CONF = "spark.htap.splitSubtrees";

  /** What was decided for an aggregate or top-N: the plan that replaces it (null: not split), and why. */
  static final class Decision {
    final LogicalPlan plan;
    final String why;

    Decision(LogicalPlan plan, String why) {
      this.plan = plan;
      this.why = why;
    }
  }

  private static final Map<LogicalPlan, Decision> DECIDED = Collections.synchronizedMap(new WeakHashMap<>());
  /** The plans built here (a merging aggregate, or a sort and limit over a split scan): planned by
   *  Spark as they are, never split or absorbed again. */
  private static final Set<LogicalPlan> BUILT = Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

  private SplitSubtree() {}

  static boolean built(LogicalPlan p) {
    return BUILT.contains(p);
  }

  /**
   * The node a split would replace at {@code p} or under its chain of sorts, limits, projections
   * and filters: the aggregate at the chain's end, else the chain's first top-N (null: neither).
   */
  static LogicalPlan below(LogicalPlan p) {
    LogicalPlan topN = null;
    while (p instanceof Sort || p instanceof GlobalLimit || p instanceof LocalLimit || p instanceof Project || p instanceof Filter) {
      if (topN == null && topNSort(p) != null) topN = p;
      p = p.children().head();
    }
    LogicalPlan found = p instanceof Aggregate ? p : topN;
    return found != null && HtapSnapshotStrategy.hasHtapScan(found) ? found : null;
  }

  /** {@code p}'s Sort when {@code p} is ORDER BY ... LIMIT n (GlobalLimit, LocalLimit, global Sort), else null. */
  private static Sort topNSort(LogicalPlan p) {
    if (!(p instanceof GlobalLimit) || !(((GlobalLimit) p).child() instanceof LocalLimit)) return null;
    LogicalPlan below = ((LocalLimit) ((GlobalLimit) p).child()).child();
    return below instanceof Sort && ((Sort) below).global() ? (Sort) below : null;
  }

  /** The decision for {@code p} (from {@link #below}), made once per plan (EXPLAIN and AQE plan it again). */
  static Decision decide(LogicalPlan p) {
    Decision d = DECIDED.get(p);
    if (d == null) {
      try {
        d = p instanceof Aggregate ? splitAggregate((Aggregate) p) : splitTopN((GlobalLimit) p, topNSort(p));
      } catch (Throwable t) {  // a bad setting is rethrown: the user must see it
        Fallbacks.record("split subtree", Integer.toHexString(p.semanticHash()), p, t);
        d = new Decision(null, "an error while splitting (logged)");
      }
      DECIDED.put(p, d);
    }
    return d;
  }

  /** For EXPLAIN of a one-task subtree: why its aggregate or top-N was not split ("" when it has none). */
  static String whyNot(LogicalPlan plan) {
    LogicalPlan p = below(plan);
    Decision d = p == null ? null : DECIDED.get(p);
    return d == null || d.plan != null ? "" : "; not split: " + d.why;
  }

  /** The split conf's value, or why the cluster alone rules the split out (local mode: one task has every core). */
  private static String[] mode() {
    String mode = JoinedTables.mode(CONF,
        "auto: split a pushed subtree's aggregate or top-N by the partitions of its largest table when the cluster's task"
            + " slots make it pay");
    if (mode.equals("false")) return new String[] {mode, CONF + "=false"};
    int[] cores = JoinedTables.cores();
    if (mode.equals("auto") && cores[0] <= cores[1]) {  // the cost rule's answer whatever the sizes
      return new String[] {mode, "splitting buys no parallelism one task lacks: " + cores[0] + " task slots, " + cores[1]
          + " cores for one task"};
    }
    return new String[] {mode, null};
  }

  /**
   * ORDER BY ... LIMIT n over a subtree: each task returns the first n rows of its partition's
   * part (the pushed plan's limit node), and Spark's own sort and limit above the scan pick the
   * first n of them.
   */
  private static Decision splitTopN(GlobalLimit g, Sort sort) {
    String[] mode = mode();
    if (mode[1] != null) return no(mode[1]);
    PlanTranslator t = new PlanTranslator();
    ObjectNode json = t.translate(g);
    if (json == null || t.leaves.isEmpty() || !t.residuals.isEmpty()) return no("the subtree is not pushed whole");
    ObjectNode root = (ObjectNode) json.get("root");
    if (!root.path("node").asText().equals("limit") || root.path("offset").asInt(0) != 0) return no("not a plain top-N");
    Split split = Split.choose(t, json, root.get("child"), mode[0]);
    if (split.scan < 0) return no(split.why);
    split.write(json);
    LogicalPlan scan = split.scanOf(t, json, sort.child().output(), "subtree top-N split: each task's first "
        + root.get("limit").asInt() + " rows, sorted and limited again by Spark");
    if (scan == null) return no("the plan check refused the split plan");
    LogicalPlan plan = g.withNewChildren(CollectionConverters.asScala(List.<LogicalPlan>of(g.child().withNewChildren(
        CollectionConverters.asScala(List.<LogicalPlan>of(sort.withNewChildren(
            CollectionConverters.asScala(List.of(scan)).toList()))).toList()))).toList());
    BUILT.add(plan);
    return new Decision(plan, split.why);
  }

  private static Decision no(String why) {
    return new Decision(null, why);
  }

  private static Decision splitAggregate(Aggregate a) {
    String[] mode = mode();
    if (mode[1] != null) return no(mode[1]);
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
    Split split = Split.choose(t, json, root.get("child"), mode[0]);
    if (split.scan < 0) return no(split.why);
    split.write(json);
    root.put("partial", true);
    LogicalPlan scan = split.scanOf(t, json, partial.output(), "subtree aggregate split: a partial aggregate per task, merged by Spark");
    if (scan == null) return no("the plan check refused the split plan");
    Aggregate merging = new Aggregate(CollectionConverters.asScala(new ArrayList<Expression>(keys)).toList(),
        CollectionConverters.asScala(merged).toList(), scan, Aggregate.apply$default$4());
    BUILT.add(merging);
    return new Decision(merging, split.why);
  }

  /** Which scan's partitions become the tasks (-1: none), the scans read by its key ranges, and why. */
  private static final class Split {
    final int scan;
    final Map<Integer, String> coPartitioned;  // scan -> its column equal to the split scan's partition column
    final String why;
    final HtapScan largest;

    private Split(int scan, Map<Integer, String> coPartitioned, String why, HtapScan largest) {
      this.scan = scan;
      this.coPartitioned = coPartitioned;
      this.why = why;
      this.largest = largest;
    }

    private static Split none(String why) {
      return new Split(-1, Map.of(), why, null);
    }

    /**
     * The table whose partitions become the tasks: the largest whose rows reach {@code top} (the
     * split node's input) through row-wise operators alone, if every other table is co-partitioned with it ({@link #coPartitioned}:
     * each task reads its rows in the task's key range) or small enough to read in every task,
     * and (mode "auto") the cost rule says the cluster's task slots pay for it. When the largest
     * cannot be split (one partition, a large table neither small nor co-partitioned), the next
     * largest is tried: with filters seen by the estimates, a whole small dimension can outweigh
     * a filtered fact table. Why not, otherwise: the largest table's reason.
     */
    static Split choose(PlanTranslator t, JsonNode json, JsonNode top, String mode) {
      Set<Integer> rowwise = new HashSet<>();
      preserved(top, rowwise);
      long threshold = SQLConf.get().autoBroadcastJoinThreshold();
      long[] bytes = new long[t.leaves.size()];
      List<Integer> candidates = new ArrayList<>();
      for (int i = 0; i < t.leaves.size(); i++) {
        HtapScan s = (HtapScan) t.leaves.get(i).scan();
        bytes[i] = s.estimateStatistics().sizeInBytes().orElse(-1);
        if (bytes[i] < 0) return none(String.join(", ", s.tableNames()) + " has no size statistics");
        int k = t.leafScans.get(i);
        if (k >= 0 && rowwise.contains(k)) candidates.add(i);
      }
      if (candidates.isEmpty()) {
        return none("no table can be split: each is on the null-supplying side of an outer join, under a limit, window,"
            + " union or inner aggregate, or read with more than its filters pushed into it");
      }
      candidates.sort((a, b) -> Long.compare(bytes[b], bytes[a]));
      Split first = null;
      for (int i : candidates) {
        Split s = attempt(t, json, top, mode, i, bytes, threshold, i == candidates.get(0));
        if (s.scan >= 0) return s;
        if (first == null) first = s;
      }
      return first;
    }

    /** Split by the partitions of leaf {@code best}, if the other tables allow it and (auto) it pays. */
    private static Split attempt(PlanTranslator t, JsonNode json, JsonNode top, String mode, int best, long[] bytes,
                                 long threshold, boolean isLargest) {
      long bestBytes = bytes[best];
      HtapScan chosen = (HtapScan) t.leaves.get(best).scan();
      String name = String.join(", ", chosen.tableNames());
      int k = t.leafScans.get(best);
      Map<Integer, String> co = chosen.partitionColumn() == null ? Map.of()
          : coPartitioned(json, top, k, chosen.partitionColumn());
      long alongside = 0;  // bytes read by the same key ranges as the split table's (one part per task)
      long whole = 0;  // bytes read in every task
      List<String> by = new ArrayList<>();
      for (int i = 0; i < t.leaves.size(); i++) {
        if (i == best) continue;
        HtapScan other = (HtapScan) t.leaves.get(i).scan();
        String column = co.get(t.leafScans.get(i));
        if (column != null) {
          by.add(String.join(", ", other.tableNames()) + " by " + column);
          if (column.equals(other.partitionColumn())) {
            alongside += bytes[i];
          } else {
            whole += bytes[i];  // its every partition read, though only the key range's rows kept
          }
        } else if (threshold <= 0 || bytes[i] > threshold) {
          return none(String.join(", ", other.tableNames()) + " reads about " + bytes[i]
              + " bytes, above spark.sql.autoBroadcastJoinThreshold=" + threshold + ", too large to read in every task"
              + " (and not joined by " + name + "'s partition column to a column of its own)");
        } else {
          whole += bytes[i];
        }
      }
      long parts = chosen.partitions();
      if (parts == 1) return none((isLargest ? "the largest table, " : "") + name + (isLargest ? "," : "") + " has one partition");
      String why = "split by the partitions of " + name + " (" + (isLargest ? "largest, " : "") + "about " + bestBytes + " bytes"
          + (by.isEmpty() ? "" : "; read by its partitions' key ranges: " + String.join(", ", by))
          + (by.size() + 1 < t.leaves.size() ? "; every other table read whole in every task)" : ")");
      if (mode.equals("true")) return new Split(k, co, why + " (" + CONF + "=true)", chosen);
      StringBuilder costs = new StringBuilder();
      if (!JoinedTables.splitPays(bestBytes + alongside, name, whole, parts, costs)) {
        return none("splitting by the partitions of " + name + " buys no parallelism one task lacks; " + costs);
      }
      return new Split(k, co, why + "; " + costs, chosen);
    }

    /**
     * The scans joined to split scan {@code k} by {@code column} (its partition column, an
     * integer or date: one order in every engine) = a column of their own, scan -> that column.
     * Exact to read only their rows whose column lies in a task's key range: such a scan sits on
     * the other side of a join J on the path from {@code top} down to scan k, reached row-wise
     * from J (so each of its rows reaches J alone), and J's condition has the conjunct
     * k.column = j.c; a row of it outside the range can match no row of the task's partition,
     * and J (k's side preserved) drops it or leaves it unmatched either way.
     */
    static Map<Integer, String> coPartitioned(JsonNode json, JsonNode top, int k, String column) {
      Map<String, Column> origins = new HashMap<>();
      origins(top, json.get("scans"), origins);
      Map<Integer, Integer> uses = new HashMap<>();
      uses(json.get("root"), uses);
      List<JsonNode[]> joins = new ArrayList<>();
      if (uses.getOrDefault(k, 0) != 1 || !pathTo(top, k, joins)) return Map.of();
      Column key = new Column(k, column);
      Map<Integer, String> out = new HashMap<>();
      for (JsonNode[] j : joins) {
        Set<Integer> other = new HashSet<>();
        preserved(j[1], other);
        List<JsonNode> conjuncts = new ArrayList<>();
        conjuncts(j[0].get("on"), conjuncts);
        for (JsonNode c : conjuncts) {
          if (!c.path("op").asText().equals("=") || c.get("args").size() != 2) continue;
          JsonNode a = c.get("args").get(0);
          JsonNode b = c.get("args").get(1);
          if (!a.has("col") || !b.has("col") || !a.path("type").equals(b.path("type"))
              || !List.of("smallint", "int", "bigint", "date").contains(a.path("type").asText())) {
            continue;
          }
          Column ca = origins.get(a.get("col").asText());
          Column cb = origins.get(b.get("col").asText());
          Column mine = key.equals(ca) ? cb : key.equals(cb) ? ca : null;
          if (mine != null && other.contains(mine.scan) && uses.getOrDefault(mine.scan, 0) == 1) {
            out.putIfAbsent(mine.scan, mine.name);
          }
        }
      }
      return out;
    }

    /**
     * Into the pushed plan: the split scan, the co-partitioned scans, and at most twice the
     * cluster's task slots as tasks (each a run of neighbouring partitions: a Python task and a
     * DuckDB query per partition would cost more than the slots gain; twice, so that a slow task
     * does not hold the others up).
     */
    void write(ObjectNode json) {
      json.put("split", scan);
      json.put("split_tasks", 2 * JoinedTables.cores()[0]);
      if (coPartitioned.isEmpty()) return;
      com.fasterxml.jackson.databind.node.ArrayNode list = json.putArray("co_split");
      for (Map.Entry<Integer, String> e : new java.util.TreeMap<>(coPartitioned).entrySet()) {
        list.addArray().add(e.getKey()).add(e.getValue());
      }
    }

    /** The split scan of {@code json} with {@code output} as its columns, or null if the plan check refuses it. */
    LogicalPlan scanOf(PlanTranslator t, ObjectNode json, scala.collection.immutable.Seq<Attribute> output, String what) {
      String pushed = Ir.text(json);
      String problem = PlanCheck.why(largest.catalogOptions(), pushed);
      if (problem != null) {
        Fallbacks.record("split subtree (plan check)", Integer.toHexString(pushed.hashCode()), pushed,
            new IllegalStateException(problem));
        return null;
      }
      List<AttributeReference> columns = new ArrayList<>();
      StructType schema = new StructType();
      for (Attribute attr : CollectionConverters.asJava(output)) {
        columns.add((AttributeReference) attr);
        schema = schema.add(PlanTranslator.name(attr), attr.dataType(), true);
      }
      String how = what + "; " + String.join(", ", new java.util.LinkedHashSet<>(t.operators)) + " over " + t.leaves.size()
          + " scans; " + why;
      return HtapSubtreeStrategy.scanOf(t, pushed, columns, schema, how);
    }
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
        merge = PlanTranslator.evaluated(avg, total, count);
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

  /** The join types whose every left (right) row reaches the join's output on its own. */
  private static final List<String> LEFT_PRESERVED = List.of("inner", "cross", "left", "semi", "anti", "existence");
  private static final List<String> RIGHT_PRESERVED = List.of("inner", "cross", "right");

  /** A table column a plan name carries unchanged: scan k's column, through projections alone. */
  private record Column(int scan, String name) {}

  /**
   * The names under {@code node} that carry a scan's column unchanged (a scan node's outputs,
   * projections of a bare column). A name is never registered past another operator, but names
   * are unique and Spark keeps a grouping column's name: the caller also asks that the scan be
   * reached row-wise.
   */
  private static void origins(JsonNode node, JsonNode scans, Map<String, Column> out) {
    for (String side : List.of("child", "left", "right")) {
      if (node.has(side)) origins(node.get(side), scans, out);
    }
    for (JsonNode c : node.path("children")) origins(c, scans, out);
    switch (node.path("node").asText()) {
      case "scan": {
        int k = node.get("scan").asInt();
        JsonNode columns = scans.get(k).get("columns");
        for (int i = 0; i < node.get("output").size(); i++) {
          out.put(node.get("output").get(i).asText(), new Column(k, columns.get(i).asText()));
        }
        return;
      }
      case "project":
        for (JsonNode named : node.get("exprs")) {
          JsonNode e = named.get("expr");
          Column from = e.has("col") ? out.get(e.get("col").asText()) : null;
          if (from != null) out.put(named.get("name").asText(), from);
        }
        return;
      default:
    }
  }

  /**
   * Whether scan {@code k}'s rows reach {@code node} row-wise (as {@link #preserved}); if so,
   * {@code joins} gets each join on the way and its other side, {join, other}.
   */
  private static boolean pathTo(JsonNode node, int k, List<JsonNode[]> joins) {
    switch (node.path("node").asText()) {
      case "scan":
        return node.get("scan").asInt() == k;
      case "project":
      case "filter":
      case "expand":
        return pathTo(node.get("child"), k, joins);
      case "join": {
        String type = node.get("type").asText();
        if (LEFT_PRESERVED.contains(type) && pathTo(node.get("left"), k, joins)) {
          joins.add(new JsonNode[] {node, node.get("right")});
          return true;
        }
        if (RIGHT_PRESERVED.contains(type) && pathTo(node.get("right"), k, joins)) {
          joins.add(new JsonNode[] {node, node.get("left")});
          return true;
        }
        return false;
      }
      default:
        return false;
    }
  }

  /** How many scan nodes read each scan, anywhere in {@code json} (subqueries too): a scan read
   *  twice is not restricted to a key range. */
  private static void uses(JsonNode json, Map<Integer, Integer> out) {
    if (json.isObject() && json.path("node").asText().equals("scan") && json.has("scan")) {
      out.merge(json.get("scan").asInt(), 1, Integer::sum);
    }
    for (JsonNode child : json) {
      if (child.isContainerNode()) uses(child, out);
    }
  }

  private static void conjuncts(JsonNode e, List<JsonNode> out) {
    if (e == null || e.isNull()) return;
    if (e.path("op").asText().equals("AND")) {
      for (JsonNode a : e.get("args")) conjuncts(a, out);
    } else {
      out.add(e);
    }
  }

  /**
   * The scans under {@code node} whose every row reaches the aggregate through row-wise operators
   * alone (projections, filters, the preserved side of joins, the copies of ROLLUP / CUBE /
   * GROUPING SETS): splitting one of them by partitions
   * splits the aggregate's input rows, each into exactly one task.
   */
  private static void preserved(JsonNode node, Set<Integer> out) {
    switch (node.path("node").asText()) {
      case "scan":
        out.add(node.get("scan").asInt());
        return;
      case "project":
      case "filter":
      case "expand":  // each row's grouping-set copies, made from that row alone
        preserved(node.get("child"), out);
        return;
      case "join": {
        String type = node.get("type").asText();
        if (LEFT_PRESERVED.contains(type)) preserved(node.get("left"), out);
        if (RIGHT_PRESERVED.contains(type)) preserved(node.get("right"), out);
        return;
      }
      default:  // an aggregate, limit, window, union, expand or sort would see one partition's rows only
    }
  }
}
