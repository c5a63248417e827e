package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.KnownNotNull;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Average;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.optimizer.BooleanSimplification;
import org.apache.spark.sql.catalyst.optimizer.ConstantFolding;
import org.apache.spark.sql.catalyst.optimizer.OptimizeIn;
import org.apache.spark.sql.catalyst.optimizer.ReplaceExpressions;
import org.apache.spark.sql.catalyst.optimizer.SimplifyBinaryComparison;
import org.apache.spark.sql.catalyst.optimizer.SimplifyCasts;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.JoinHint;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias$;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * An aggregate over an HTAP table answered from one of its derived views (issue 31, {@code htap
 * views create}): the view keeps, per group, a row count and the sums, counts, minima and
 * maxima of its columns, at the same seqs as its table, so Spark re-aggregates the view's few
 * rows instead of scanning the table. Reading {@code <catalog>.views.<name>} is this rule too:
 * Spark sees a view as its SQL over the table (HtapCatalog.loadView), and this rule reads it.
 *
 * <p>An {@code Aggregate} is answered when, below it, there are only column projections and
 * filters over one HTAP table — or inner joins of exactly a join view's table and dimensions,
 * whose join conditions are then part of the view's filter — and a view of that table (the
 * table's loadTable answer lists the readable ones, smallest first) has:
 * <ul>
 *   <li>every grouping expression over its group columns (the same or a coarser grouping);
 *   <li>its own filter among the query's conjuncts (Spark-analyzed and compared with
 *       {@code semanticEquals}), every other conjunct over its group columns only (an
 *       {@code IS NOT NULL} its filter already implies aside);
 *   <li>a state for every aggregate: COUNT(*) and COUNT(x) are sums of counts, SUM(x) a sum of
 *       sums (NULL where no value was counted), AVG(x) Spark's own Average evaluated over the
 *       summed sum and count, MIN/MAX(x) of minima/maxima (not of floating point columns,
 *       whose -0.0 and NaN Spark orders its own way);
 *       MIN/MAX and DISTINCT aggregates of expressions over group columns, over the groups.
 *       Other DISTINCT aggregates and FILTER aggregates are left.
 * </ul>
 * A time-travel read ({@code FOR VERSION|TIMESTAMP AS OF}, every table of the region at one seq)
 * is read from a view at that seq, when the view holds it (its loadTable answer lists only such
 * views: built by then, in the view's and the tables' queryable windows; by time, only once a
 * later checkpoint has fixed the seq), and a catalog's {@code as_of_seq} (the seq {@code htap
 * verify} replays at) from a view built at or before it. Anything else — a catalog routing to
 * the source or reading the service's tail, the table's failover or staleness settings (a view
 * has no source table to fall back to) — leaves the plan as it is: Spark reads the table. {@code spark.htap.viewRewrite=false}
 * turns the rule off. EXPLAIN shows the view's table ({@code <catalog>.views.<name>}) where
 * the table was.
 */
public final class ViewRewrite extends Rule<LogicalPlan> {
  static final String CONF = "spark.htap.viewRewrite";

  /** A view of a table as its loadTable answer describes it (htap.pushdown.spark_types.rewrite_views). */
  static final class View {
    final String name;
    final Set<String> groups;
    final String filter;  // Spark SQL over the table's columns; null: every row
    final long since;  // the seq it was built at: it answers reads at that seq and after
    private final Map<String, String> states;  // "fn:arg" ("count:" is COUNT(*)) -> state column
    // A join view's tables (schema.table) by the alias its filter names them with; empty for one
    // table. Its dimensions' columns are named <alias><separator><column> in its groups and states.
    final Map<String, String> tables;
    final String separator;  // (htap.rewrite.views.DIMENSION_SEPARATOR; null for one table)

    private View(String name, Set<String> groups, String filter, long since, Map<String, String> states,
                 Map<String, String> tables, String separator) {
      this.name = name;
      this.since = since;
      this.groups = groups;
      this.filter = filter;
      this.states = states;
      this.tables = tables;
      this.separator = separator;
    }

    static List<View> parse(JsonNode views) {
      List<View> out = new ArrayList<>();
      if (views == null) return out;
      for (JsonNode v : views) {
        Set<String> groups = new TreeSet<>();
        v.get("groups").forEach(g -> groups.add(g.asText()));
        Map<String, String> states = new HashMap<>();
        for (JsonNode s : v.get("states")) {
          states.put(s.get("fn").asText() + ":" + (s.get("arg").isNull() ? "" : s.get("arg").asText()), s.get("name").asText());
        }
        Map<String, String> tables = new HashMap<>();
        if (v.has("tables")) v.get("tables").fields().forEachRemaining(t -> tables.put(t.getKey(), t.getValue().asText()));
        out.add(new View(v.get("name").asText(), groups, v.get("filter").isNull() ? null : v.get("filter").asText(),
            v.get("since").asLong(), states, tables, v.has("separator") ? v.get("separator").asText() : null));
      }
      return out;
    }

    /** The state column keeping {@code fn} of {@code column} (null: COUNT(*)), or null if none. */
    String state(String fn, String column) {
      return states.get(fn + ":" + (column == null ? "" : column));
    }
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!enabled() || !PlanRules.readsHtap(plan)) return plan;
    return PlanRules.transformUp(plan, Aggregate.class, ViewRewrite::answer);
  }

  static boolean enabled() {
    return !"false".equalsIgnoreCase(SQLConf.get().getConfString(CONF, "true").trim());
  }

  /** The aggregate over a view's states, or null when no view of its tables answers it. */
  private static LogicalPlan answer(Aggregate aggregate) {
    Region region = new Region();
    if (!region.collect(aggregate.child())) return null;
    if (region.leaves.stream().allMatch(l -> ((HtapTable) l.table()).views.isEmpty())) return null;
    Long seq = region.readSeq();
    if (seq == null) return null;
    Map<ExprId, Expression> defined = region.defined;
    List<Expression> grouping = new ArrayList<>();
    for (Expression g : CollectionConverters.asJava(aggregate.groupingExpressions())) grouping.add(inline(g, defined));
    List<NamedExpression> outputs = new ArrayList<>();
    for (NamedExpression e : CollectionConverters.asJava(aggregate.aggregateExpressions())) {
      outputs.add(e instanceof Attribute && defined.containsKey(e.exprId())
          ? new Alias(defined.get(e.exprId()), e.name(), e.exprId(), e.qualifier(), Option.empty(), seq(List.of()))
          : (NamedExpression) inline((Expression) e, defined));
    }
    for (DataSourceV2Relation relation : region.leaves) {
      HtapTable table = (HtapTable) relation.table();
      for (View view : table.views) {
        if (seq != PRESENT && seq < view.since) continue;  // before the view was built
        if (!region.joins(view)) continue;
        try {
          return new Match(aggregate, relation, region, view, seq).plan(grouping, outputs, region.conjuncts);
        } catch (NoMatch e) {
          // the next view, if any
        }
      }
    }
    return null;
  }

  /**
   * What lies between an aggregate and its tables: inner joins, filters and column projections
   * over HTAP tables of one catalog — the conjuncts of every filter and join condition, and what
   * each projected column is over the tables' columns (Spark pulls a grouping expression out
   * into a projection below).
   */
  private static final class Region {
    final List<DataSourceV2Relation> leaves = new ArrayList<>();
    final List<Expression> conjuncts = new ArrayList<>();
    final Map<ExprId, Expression> defined = new HashMap<>();

    /** Children first (a projection's columns are defined over what is below it); false: not such a region. */
    boolean collect(LogicalPlan p) {
      if (p instanceof DataSourceV2Relation && ((DataSourceV2Relation) p).table() instanceof HtapTable) {
        leaves.add((DataSourceV2Relation) p);
        return true;
      }
      if (p instanceof Filter) {
        if (!collect(((Filter) p).child())) return false;
        conjuncts.addAll(split(inline(((Filter) p).condition(), defined)));
        return true;
      }
      if (p instanceof Join) {
        Join join = (Join) p;
        if (join.joinType() != Inner$.MODULE$ || !collect(join.left()) || !collect(join.right())) return false;
        if (join.condition().isDefined()) conjuncts.addAll(split(inline(join.condition().get(), defined)));
        return true;
      }
      if (!(p instanceof Project) || !collect(((Project) p).child())) return false;
      for (NamedExpression e : CollectionConverters.asJava(((Project) p).projectList())) {
        if (e instanceof Alias) {
          Expression value = ((Alias) e).child();
          if (!value.deterministic() || SubqueryExpression.hasSubquery(value)) return false;
          defined.put(e.exprId(), inline(value, defined));
        } else if (!(e instanceof Attribute)) {
          return false;
        }
      }
      return true;
    }

    /** The seq every table is read at (readSeq), or null when they differ or no view answers. */
    Long readSeq() {
      Long seq = null;
      HtapCatalog catalog = null;
      for (DataSourceV2Relation leaf : leaves) {
        HtapTable table = (HtapTable) leaf.table();
        Long at = ViewRewrite.readSeq(table);
        if (at == null || (seq != null && !seq.equals(at)) || (catalog != null && catalog != table.catalog)) return null;
        seq = at;
        catalog = table.catalog;
      }
      return seq;
    }

    /** Whether the region's tables are exactly the view's: its one table, or its table and dimensions. */
    boolean joins(View view) {
      if (view.tables.isEmpty()) return leaves.size() == 1;
      Set<String> names = new HashSet<>();
      for (DataSourceV2Relation leaf : leaves) names.add(((HtapTable) leaf.table()).options.get("table"));
      return leaves.size() == view.tables.size() && names.equals(view.tables.keySet());
    }

    /** The view's alias of a region's table. */
    String alias(View view, DataSourceV2Relation leaf) {
      return view.tables.get(((HtapTable) leaf.table()).options.get("table"));
    }
  }

  /** {@code e} with each projected column replaced by what it is over the table's columns. */
  private static Expression inline(Expression e, Map<ExprId, Expression> defined) {
    if (e instanceof Attribute && defined.containsKey(((Attribute) e).exprId())) return defined.get(((Attribute) e).exprId());
    if (defined.isEmpty()) return e;
    return e.mapChildren(new scala.runtime.AbstractFunction1<Expression, Expression>() {
      @Override
      public Expression apply(Expression child) {
        return inline(child, defined);
      }
    });
  }

  /** The table's reads are at the query's snapshot: {@link #readSeq}'s answer. */
  private static final long PRESENT = -1;

  /**
   * The seq the table is read at, for a view to be read at too: PRESENT (the query's snapshot),
   * a time-travel read's seq (by version or time: the one its loadTable answer fixed, and the
   * views it lists hold), the catalog's {@code as_of_seq} (what {@code htap verify} replays at),
   * or null when no view answers such a read: time travel to a seq not fixed yet (a time no
   * checkpoint has passed), an exported source snapshot, the source route, or the service's
   * in-memory tail (it holds the table's newest changes, not its views').
   */
  private static Long readSeq(HtapTable table) {
    Map<String, String> options = table.options;
    String snapshot = options.get("source_snapshot");
    if (snapshot != null && !snapshot.isEmpty()) return null;
    String tail = HtapScan.setting(HtapScan.READ_TAIL_CONF, "read_tail", options);
    if ("true".equalsIgnoreCase(tail) || "source".equalsIgnoreCase(options.getOrDefault("route", "auto"))) {
      return null;
    }
    String version = options.get("as_of_version");
    String asOf = options.get("as_of_seq");
    // (the scan's precedence: a version, then the catalog's seq, then a time)
    if ((version != null && !version.isEmpty()) || ((asOf == null || asOf.isBlank()) && options.containsKey("as_of_time"))) {
      return table.viewsAt;
    }
    if (asOf == null || asOf.isBlank()) return PRESENT;
    try {
      return Long.parseLong(asOf.trim());
    } catch (NumberFormatException e) {
      return null;  // the scan says what is wrong with it
    }
  }

  /** A view that does not answer the aggregate (thrown from deep inside the mapping, caught once). */
  private static final class NoMatch extends RuntimeException {
    NoMatch() {
      super(null, null, false, false);
    }
  }

  /** Matching one aggregate over one table's relation (or a join view's tables) to one view. */
  private static final class Match {
    private final Aggregate aggregate;
    private final HtapTable table;
    private final View view;
    private final long seq;  // where the view is read: PRESENT, or the seq the tables are read at
    // What the view's filter is analyzed over: the table's relation, or a join view's tables, each
    // under the alias the view's SQL gives it (the query's own attributes either way).
    private final LogicalPlan scope;
    private final Map<ExprId, String> names = new HashMap<>();  // the view's columns by the tables' attributes
    private final Set<ExprId> groups = new HashSet<>();  // the tables' attributes that are view groups
    private Map<String, AttributeReference> states;  // the view relation's columns by name
    private DataSourceV2Relation statesRelation;

    Match(Aggregate aggregate, DataSourceV2Relation relation, Region region, View view, long seq) {
      this.aggregate = aggregate;
      this.seq = seq;
      this.table = (HtapTable) relation.table();
      this.view = view;
      LogicalPlan scope = view.tables.isEmpty() ? relation : null;
      for (DataSourceV2Relation leaf : region.leaves) {
        String prefix = leaf == relation ? "" : region.alias(view, leaf) + view.separator;
        for (AttributeReference a : CollectionConverters.asJava(leaf.output())) {
          names.put(a.exprId(), prefix + a.name());
          if (view.groups.contains(prefix + a.name())) groups.add(a.exprId());
        }
        if (!view.tables.isEmpty()) {
          LogicalPlan aliased = SubqueryAlias$.MODULE$.apply(region.alias(view, leaf), leaf);
          scope = scope == null ? aliased : new Join(scope, aliased, Inner$.MODULE$, Option.empty(), JoinHint.NONE());
        }
      }
      this.scope = scope;
    }

    /** The aggregate's grouping, outputs and filter conjuncts, over the table's columns. */
    LogicalPlan plan(List<Expression> tableGrouping, List<NamedExpression> tableOutputs, List<Expression> queryConjuncts) {
      List<Expression> kept = remainingConjuncts(queryConjuncts);
      for (Expression g : tableGrouping) {
        if (!overGroups(g)) throw new NoMatch();
      }
      // Every output derivable (a dry run over stand-in states: the optimizer calls the rule
      // again and again, and a view that does not answer must cost no bridge call); only then
      // the view's table is loaded.
      for (NamedExpression e : tableOutputs) output(e);
      load();
      List<Expression> grouping = new ArrayList<>();
      for (Expression g : tableGrouping) grouping.add(map(g));
      List<NamedExpression> outputs = new ArrayList<>();
      for (NamedExpression e : tableOutputs) outputs.add(output(e));
      LogicalPlan child = statesRelation;
      if (!kept.isEmpty()) {
        Expression condition = null;
        for (Expression c : kept) condition = condition == null ? map(c) : new And(condition, map(c));
        child = new Filter(condition, child);
      }
      return new Aggregate(seq(grouping), seq(outputs), child, aggregate.hint());
    }

    /**
     * The query's conjuncts left to apply to the view's rows (each over group columns), once
     * the view's own filter is found among them; NoMatch if it is not, or if another conjunct
     * reads a column the view does not group by.
     */
    private List<Expression> remainingConjuncts(List<Expression> queryConjuncts) {
      List<Expression> required = viewConjuncts();
      Set<ExprId> impliedNotNull = new HashSet<>();
      for (Expression c : required) notNullIn(c, impliedNotNull);
      boolean[] found = new boolean[required.size()];
      List<Expression> kept = new ArrayList<>();
      for (Expression c : canonical(queryConjuncts)) {
        int hit = -1;
        for (int i = 0; i < required.size() && hit < 0; i++) {
          if (required.get(i).semanticEquals(c)) hit = i;
        }
        if (hit >= 0) {
          found[hit] = true;
        } else if (c instanceof IsNotNull && ((IsNotNull) c).child() instanceof Attribute
            && impliedNotNull.contains(((Attribute) ((IsNotNull) c).child()).exprId())) {
          continue;  // Spark's constraint inference added it from the view's own filter
        } else if (overGroups(c)) {
          kept.add(c);
        } else {
          throw new NoMatch();
        }
      }
      for (boolean f : found) {
        if (!f) throw new NoMatch();
      }
      return kept;
    }

    /** The view's filter analyzed by Spark over the query's own relations (same attributes), as conjuncts. */
    private List<Expression> viewConjuncts() {
      if (view.filter == null) return List.of();
      SparkSession spark = SparkSession.active();
      LogicalPlan analyzed;
      try {
        Expression parsed = spark.sessionState().sqlParser().parseExpression(view.filter);
        analyzed = spark.sessionState().analyzer().execute(new Filter(parsed, scope));
      } catch (RuntimeException | org.apache.spark.sql.catalyst.parser.ParseException e) {
        throw new NoMatch();
      }
      if (!analyzed.resolved() || !(analyzed instanceof Filter)) throw new NoMatch();
      return canonical(split(((Filter) analyzed).condition()));
    }

    /**
     * Conjuncts in the shape Spark's optimizer gives a filter (BETWEEN as two comparisons, IN
     * of one value as =, constants folded, casts simplified), so the view's filter and the
     * query's compare equal when they say the same.
     */
    private List<Expression> canonical(List<Expression> conjuncts) {
      if (conjuncts.isEmpty()) return conjuncts;
      Expression condition = null;
      for (Expression c : conjuncts) condition = condition == null ? c : new And(condition, c);
      LogicalPlan plan = new Filter(condition, scope);
      for (int round = 0; round < 2; round++) {
        plan = ReplaceExpressions.apply(plan);
        plan = ConstantFolding.apply(plan);
        plan = OptimizeIn.apply(plan);
        plan = SimplifyCasts.apply(plan);
        plan = SimplifyBinaryComparison.apply(plan);
        plan = BooleanSimplification.apply(plan);
      }
      if (!(plan instanceof Filter)) throw new NoMatch();
      return split(((Filter) plan).condition());
    }

    /** Columns a conjunct implies are not NULL (a chain of null-intolerant expressions down to them). */
    private static void notNullIn(Expression e, Set<ExprId> out) {
      if (e instanceof Attribute) {
        out.add(((Attribute) e).exprId());
      } else if (e.nullIntolerant()) {
        for (Expression c : CollectionConverters.asJava(e.children())) notNullIn(c, out);
      }
    }

    private boolean overGroups(Expression e) {
      if (!e.deterministic() || SubqueryExpression.hasSubquery(e)) return false;
      for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) {
        if (!groups.contains(a.exprId())) return false;
      }
      return true;
    }

    private void load() {
      HtapTable states;
      try {
        states = table.catalog.loadStates(view.name, seq == PRESENT ? null : seq);
      } catch (NoSuchTableException | Bridge.NoSuchTable e) {
        throw new NoMatch();  // dropped since the table was loaded: the table answers
      }
      statesRelation = DataSourceV2Relation.create(states, Option.apply(table.catalog),
          Option.apply(Identifier.of(new String[] {HtapCatalog.VIEWS}, view.name)));
      this.states = new HashMap<>();
      for (AttributeReference a : CollectionConverters.asJava(statesRelation.output())) this.states.put(a.name(), a);
    }

    /** An output of the aggregate, computed from the view: the same name, id and type. */
    private NamedExpression output(NamedExpression e) {
      if (e instanceof Attribute) {  // a group column, as is
        Attribute a = (Attribute) e;
        return new Alias(map(a), a.name(), a.exprId(), a.qualifier(), Option.apply(a.metadata()), seq(List.of()));
      }
      return (NamedExpression) map((Expression) e);
    }

    /** An expression over the table as one over the view: aggregates from states, group columns as the view's. */
    private Expression map(Expression e) {
      if (e instanceof AggregateExpression) return aggregate((AggregateExpression) e);
      if (e instanceof Attribute && names.containsKey(((Attribute) e).exprId())) {
        Attribute a = (Attribute) e;
        if (!groups.contains(a.exprId())) throw new NoMatch();
        AttributeReference mapped = states == null ? (AttributeReference) a : states.get(names.get(a.exprId()));
        if (mapped == null || !mapped.dataType().sameType(a.dataType())) throw new NoMatch();
        return !a.nullable() && mapped.nullable() ? new KnownNotNull(mapped) : mapped;
      }
      return e.mapChildren(new scala.runtime.AbstractFunction1<Expression, Expression>() {
        @Override
        public Expression apply(Expression child) {
          return map(child);
        }
      });
    }

    private Expression aggregate(AggregateExpression e) {
      if (e.mode() != Complete$.MODULE$ || e.filter().isDefined()) throw new NoMatch();
      AggregateFunction f = e.aggregateFunction();
      // MIN/MAX and DISTINCT aggregates of group columns: every value (combination) of the
      // table's rows is some group's, each group holds at least one row (a group's last row gone
      // deletes it), and these aggregates do not count how many rows hold a value — Spark
      // computes them over the groups. (Not over floating point: -0.0 and 0.0, or NaNs, may be one group.)
      if ((e.isDistinct() || f instanceof Min || f instanceof Max) && overGroups(f) && !floating(f)) {
        return new AggregateExpression((AggregateFunction) map(f), Complete$.MODULE$, e.isDistinct(), Option.empty(),
            NamedExpression$.MODULE$.newExprId());
      }
      if (e.isDistinct()) throw new NoMatch();
      if (f instanceof Count) {
        List<Expression> args = CollectionConverters.asJava(f.children());
        boolean rows = args.stream().allMatch(a -> a.foldable() && a.eval(null) != null);
        return count(rows ? view.state("count", null) : view.state("count", column(args)));
      }
      if (f instanceof Sum) {
        Sum sum = (Sum) f;
        // Without ANSI, Spark's SUM of integers wraps around on overflow; the exact sum would not.
        if (!(sum.dataType() instanceof DecimalType) && !SQLConf.get().ansiEnabled()) throw new NoMatch();
        String column = column(List.of(sum.child()));
        Expression total = new Cast(of(new Sum(state(view.state("sum", column)))), sum.dataType(), timeZone());
        return new If(new EqualTo(count(view.state("count", column)), Literal.create(0L, DataTypes.LongType)),
            Literal.create(null, sum.dataType()), total);
      }
      if (f instanceof Average) {
        Average avg = (Average) f;
        String column = column(List.of(avg.child()));
        Expression sum = new Cast(of(new Sum(state(view.state("sum", column)))), avg.sumDataType(), timeZone());
        Expression count = count(view.state("count", column));
        ExprId sumId = avg.sum().exprId();
        ExprId countId = avg.count().exprId();
        return replace(avg.evaluateExpression(), sumId, sum, countId, count);
      }
      if (f instanceof Min || f instanceof Max) {
        Expression arg = f.children().head();
        if (arg.dataType() instanceof FloatType || arg.dataType() instanceof DoubleType) throw new NoMatch();
        String fn = f instanceof Min ? "min" : "max";
        Attribute state = state(view.state(fn, column(List.of(arg))));
        return of(f instanceof Min ? new Min(state) : new Max(state));
      }
      throw new NoMatch();
    }

    /** Whether a column {@code e} reads is of a floating point type. */
    private static boolean floating(Expression e) {
      for (Attribute a : CollectionConverters.asJava(e.references().toSeq())) {
        if (a.dataType() instanceof FloatType || a.dataType() instanceof DoubleType) return true;
      }
      return false;
    }

    /** Average's result expression with its buffer's sum and count taken from the view. */
    private static Expression replace(Expression e, ExprId sumId, Expression sum, ExprId countId, Expression count) {
      if (e instanceof Attribute && ((Attribute) e).exprId().equals(sumId)) return sum;
      if (e instanceof Attribute && ((Attribute) e).exprId().equals(countId)) return count;
      return e.mapChildren(new scala.runtime.AbstractFunction1<Expression, Expression>() {
        @Override
        public Expression apply(Expression child) {
          return replace(child, sumId, sum, countId, count);
        }
      });
    }

    /** The table column an aggregate's one argument is, or NoMatch. */
    private String column(List<Expression> args) {
      if (args.size() != 1 || !(args.get(0) instanceof Attribute)) throw new NoMatch();
      String name = names.get(((Attribute) args.get(0)).exprId());
      if (name == null) throw new NoMatch();
      return name;
    }

    /** The sum of a count state over the view's rows: 0, never NULL, where no row is. */
    private Expression count(String state) {
      return new Coalesce(seq(List.of(of(new Sum(state(state))), Literal.create(0L, DataTypes.LongType))));
    }

    /** The view's state column {@code name}; before the view is loaded (a dry run), a stand-in. */
    private AttributeReference state(String name) {
      if (name == null) throw new NoMatch();
      if (states == null) {
        return new AttributeReference(name, DataTypes.LongType, true, org.apache.spark.sql.types.Metadata.empty(),
            NamedExpression$.MODULE$.newExprId(), seq(List.of()));
      }
      AttributeReference a = states.get(name);
      if (a == null) throw new NoMatch();
      return a;
    }

    private static Expression of(AggregateFunction f) {
      return new AggregateExpression(f, Complete$.MODULE$, false, Option.empty(), NamedExpression$.MODULE$.newExprId());
    }

    private static Option<String> timeZone() {
      return Option.apply(SQLConf.get().sessionLocalTimeZone());
    }
  }

  private static List<Expression> split(Expression e) {
    if (e instanceof And) {
      List<Expression> out = new ArrayList<>(split(((And) e).left()));
      out.addAll(split(((And) e).right()));
      return out;
    }
    return new ArrayList<>(List.of(e));
  }

  private static <T> scala.collection.immutable.Seq<T> seq(List<T> items) {
    return CollectionConverters.asScala(items).toList();
  }
}
