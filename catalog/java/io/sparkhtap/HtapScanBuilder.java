package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NullOrdering;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Avg;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.join.JoinType;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownJoin;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownTopN;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.SupportsPushDownV2Filters;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.*;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Takes Spark's pushed predicates, required columns, joins with other HTAP tables of the same
 * catalog and source, partial (or complete) aggregation (over expressions too), top-N and limit;
 * hands them to the Python {@code htap} data source as the {@code pushed} option — a pushed plan
 * (htap.rewrite.pushed, built with {@link Ir}; expressions by {@link ExprTranslator}, the one
 * translator) — and builds Spark's own Python scan with the matching output schema. A predicate
 * the translator cannot carry exactly stays in Spark; an error while translating one is a
 * fallback ({@link Fallbacks}), never a failed query.
 *
 * <p>Joins ({@code spark.sql.optimizer.datasourceV2JoinPushdown=true}): Spark offers a join only
 * when no filter is left above either side, and then this builder (the left side's) carries the
 * joined tables ({@link JoinedTables}); aggregates, top-N and limit above the join come to it too.
 * A joined scan runs as one task, or split by the partitions of its largest table when the
 * others are small and the cluster's slots make that pay (JoinedTables.split): in one task its aggregate is complete, so Spark merges
 * nothing.
 */
public class HtapScanBuilder implements SupportsPushDownV2Filters, SupportsPushDownRequiredColumns,
    SupportsPushDownAggregates, SupportsPushDownJoin, SupportsPushDownTopN, SupportsPushDownLimit {
  private final String tableName;
  private final StructType tableSchema;
  private final Map<String, String> options;

  private StructType outputSchema;
  private Predicate[] pushedPredicates = new Predicate[0];
  private final List<ObjectNode> filter = new ArrayList<>();  // conjuncts over the table's columns
  private Aggregated aggregated;  // the pushed aggregate, or null
  private Aggregation pushedAggregation;
  private boolean completeAggregation;
  private boolean averageSplit;  // an AVG refused as complete: Spark asks again with SUM and COUNT
  private List<ObjectNode> orderKeys;  // top-N keys over the scan's rows or the aggregate's outputs
  private final Set<String> keyColumns = new LinkedHashSet<>();  // table columns the keys read
  private int limit = -1;

  /** A pushed aggregate: its grouping expressions and its named outputs (over its input's names). */
  private static final class Aggregated {
    final List<ObjectNode> groupBy = new ArrayList<>();
    final List<ObjectNode> exprs = new ArrayList<>();  // Ir.named
    final Set<String> inputs = new LinkedHashSet<>();  // table columns read (single table)
  }

  private final long[] stats;
  private final Map<String, FilterEstimate.Column> columns;  // the table's column statistics (FilterEstimate)
  private final JoinedTables joined = new JoinedTables();
  private Object[] tableSplit;  // JoinedTables.splitTable(stats), decided once per builder

  HtapScanBuilder(String tableName, StructType tableSchema, Map<String, String> options, long[] stats,
                  Map<String, FilterEstimate.Column> columns) {
    this.tableName = tableName;
    this.tableSchema = tableSchema;
    this.options = options;
    this.stats = stats;
    this.columns = columns;
    this.outputSchema = tableSchema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    boolean ansi = SQLConf.get().ansiEnabled();
    List<Predicate> pushed = new ArrayList<>();
    List<Predicate> rest = new ArrayList<>();
    Saved before = new Saved();
    for (Predicate p : predicates) {
      try {
        PlanCheck.injectTranslationFailure();
        if (pushPredicate(p, ansi)) {
          pushed.add(p);
          continue;
        }
      } catch (Throwable t) {
        Fallbacks.record("filter pushdown", tableName, p, t);
      }
      rest.add(p);
    }
    if (!pushed.isEmpty() && !accepted("filter pushdown")) {
      // One of them renders wrong: keep each that does on its own (a plan check per predicate).
      before.restore();
      List<Predicate> all = pushed;
      pushed = new ArrayList<>();
      for (Predicate p : all) (attempt("filter pushdown", p, () -> pushPredicate(p, ansi)) ? pushed : rest).add(p);
    }
    pushedPredicates = pushed.toArray(new Predicate[0]);
    return rest.toArray(new Predicate[0]);
  }

  /** What the push methods change, so that a push the plan check refuses is undone. */
  private final class Saved {
    private final int filters = filter.size();
    private final Aggregated aggregate = aggregated;
    private final Aggregation aggregation = pushedAggregation;
    private final boolean complete = completeAggregation;
    private final StructType schema = outputSchema;
    private final List<ObjectNode> keys = orderKeys;
    private final Set<String> keyReads = new LinkedHashSet<>(keyColumns);
    private final int limited = limit;
    private final List<JoinedTables.Leaf> leaves = new ArrayList<>(joined.leaves);
    private final List<ObjectNode> steps = new ArrayList<>(joined.steps);
    private final List<JoinedTables.Out> outputs = new ArrayList<>(joined.outputs);

    void restore() {
      filter.subList(filters, filter.size()).clear();
      aggregated = aggregate;
      pushedAggregation = aggregation;
      completeAggregation = complete;
      outputSchema = schema;
      orderKeys = keys;
      keyColumns.clear();
      keyColumns.addAll(keyReads);
      limit = limited;
      joined.leaves.clear();
      joined.leaves.addAll(leaves);
      joined.steps.clear();
      joined.steps.addAll(steps);
      joined.outputs.clear();
      joined.outputs.addAll(outputs);
    }
  }

  /**
   * One push: {@code push} changes this builder; the pushed plan it leads to is then checked
   * ({@link PlanCheck}). A push that is refused, fails the check or throws (a fallback, logged
   * and counted) is undone: that part stays in Spark.
   */
  private boolean attempt(String where, Object what, java.util.function.BooleanSupplier push) {
    Saved saved = new Saved();
    try {
      PlanCheck.injectTranslationFailure();
      if (push.getAsBoolean() && accepted(where)) return true;
    } catch (Throwable t) {
      Fallbacks.record(where, tableName, what, t);
    }
    saved.restore();
    return false;
  }

  /** Whether the plan this builder would push now passes the plan check (a fallback if not). */
  private boolean accepted(String where) {
    if (system()) return true;  // built from the metadata store and queried in DuckDB on the driver
    String plan = pushedJson();
    String why = PlanCheck.why(options, plan);
    if (why == null) return true;
    Fallbacks.record(where + " (plan check)", tableName, plan, new IllegalStateException(why));
    return false;
  }

  /** Whether {@code p} was translated and taken into the scan's filter. */
  private boolean pushPredicate(Predicate p, boolean ansi) {
    ExprTranslator.Typed typed = ExprTranslator.translate(p, tableSchema, ansi);
    if (typed == null || !(typed.type instanceof BooleanType)) return false;
    filter.add(typed.json);
    return true;
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushedPredicates;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    if (aggregated == null && !joined.joined()) {
      outputSchema = requiredSchema;
    }
  }

  // --- joins ----------------------------------------------------------------------------------

  private String catalogName() {
    return tableName.substring(0, tableName.indexOf('.'));
  }

  private Map<String, String> catalogOptions() {
    Map<String, String> o = new HashMap<>(options);
    o.remove("table");
    return o;
  }

  private boolean system() {
    return options.getOrDefault("table", "").startsWith(SYSTEM_SCHEMA + ".");
  }

  static final String SYSTEM_SCHEMA = "htap";  // keep in sync with htap.pushdown.system_tables

  /** Same catalog, same source, same options (route, user, snapshot, time travel): one snapshot. */
  @Override
  public boolean isOtherSideCompatibleForJoin(SupportsPushDownJoin other) {
    if (!(other instanceof HtapScanBuilder)) return false;
    HtapScanBuilder o = (HtapScanBuilder) other;
    return catalogName().equals(o.catalogName()) && catalogOptions().equals(o.catalogOptions())
        && !system() && !o.system() && !pushedBeyondJoin() && !o.pushedBeyondJoin();
  }

  private boolean pushedBeyondJoin() {
    return aggregated != null || orderKeys != null || limit >= 0;
  }

  /** This builder's tables: itself alone until it is joined. */
  private JoinedTables tables() {
    if (joined.leaves.isEmpty()) {
      String qualified = options.get("table");
      joined.leaves.add(new JoinedTables.Leaf(tableName, qualified, tableSchema, filter, stats, columns));
      for (StructField f : tableSchema.fields()) {
        joined.outputs.add(new JoinedTables.Out(f.name(), 0, f.name(), f.dataType()));
      }
    }
    return joined;
  }

  @Override
  public boolean pushDownJoin(SupportsPushDownJoin other, JoinType joinType, ColumnWithAlias[] leftColumns,
                              ColumnWithAlias[] rightColumns, Predicate condition) {
    return attempt("join pushdown", joinType + " ON " + condition,
        () -> join(other, joinType, leftColumns, rightColumns, condition));
  }

  private boolean join(SupportsPushDownJoin other, JoinType joinType, ColumnWithAlias[] leftColumns,
                       ColumnWithAlias[] rightColumns, Predicate condition) {
    String type = JoinedTables.joinType(joinType);
    if (type == null || !isOtherSideCompatibleForJoin(other)) return false;
    JoinedTables left = tables();
    JoinedTables right = ((HtapScanBuilder) other).tables();
    // A left-deep chain: the single table joins onto the other side's chain (the type flipped
    // when this side is the single one). Two chains would need a bushy join: not pushed.
    boolean flip = right.joined();
    if (left.joined() && right.joined()) return false;
    JoinedTables first = flip ? right : left;
    JoinedTables single = flip ? left : right;
    int offset = first.leaves.size();
    List<JoinedTables.Out> outs = new ArrayList<>();
    if (!columns(left, leftColumns, flip ? offset : 0, outs) || !columns(right, rightColumns, flip ? 0 : offset, outs)) {
      return false;
    }
    JoinedTables result = new JoinedTables();
    result.leaves.addAll(first.leaves);
    result.leaves.add(single.leaves.get(0));
    result.steps.addAll(first.steps);
    result.outputs.addAll(outs);
    ExprTranslator.Typed on = ExprTranslator.translate(condition, result.outputSchema(), SQLConf.get().ansiEnabled());
    if (on == null || !(on.type instanceof BooleanType) || !result.resolve(on.json)) return false;
    String stepType = !flip ? type : type.equals("left") ? "right" : type.equals("right") ? "left" : type;
    ObjectNode step = Ir.MAPPER.createObjectNode();
    step.put("type", stepType).set("on", on.json);
    result.steps.add(step);
    // Commit: each table reads the columns the joined relation keeps (conditions refer to those).
    for (JoinedTables.Out o : outs) result.leaves.get(o.table).columns.add(o.column);
    joined.leaves.clear();
    joined.leaves.addAll(result.leaves);
    joined.steps.clear();
    joined.steps.addAll(result.steps);
    joined.outputs.clear();
    joined.outputs.addAll(result.outputs);
    StructType schema = new StructType();
    for (ColumnWithAlias c : leftColumns) schema = schema.add(name(c), typeOf(outs, name(c)), true);
    for (ColumnWithAlias c : rightColumns) schema = schema.add(name(c), typeOf(outs, name(c)), true);
    outputSchema = schema;
    return true;
  }

  private static String name(ColumnWithAlias c) {
    return c.alias() != null ? c.alias() : c.colName();
  }

  private static DataType typeOf(List<JoinedTables.Out> outs, String name) {
    for (JoinedTables.Out o : outs) {
      if (o.name.equals(name)) return o.type;
    }
    throw new IllegalStateException("no joined column " + name);
  }

  /** The side's required columns as joined outputs (table indices shifted by {@code offset}). */
  private static boolean columns(JoinedTables side, ColumnWithAlias[] cols, int offset, List<JoinedTables.Out> outs) {
    for (ColumnWithAlias c : cols) {
      JoinedTables.Out o = side.output(c.colName());
      if (o == null) return false;
      outs.add(new JoinedTables.Out(name(c), o.table + offset, o.column, o.type));
    }
    return true;
  }

  /**
   * A V2 expression over this scan's relation (the table, or the joined relation) as a typed
   * expression of the plan; the table columns it reads are added to {@code reads} (single table).
   */
  private ExprTranslator.Typed translate(Expression e, boolean ansi, Set<String> reads) {
    if (!joined.joined()) {
      ExprTranslator.Typed t = ExprTranslator.translate(e, tableSchema, ansi);
      if (t != null) columnsOf(t.json, reads);
      return t;
    }
    ExprTranslator.Typed t = ExprTranslator.translate(e, joined.outputSchema(), ansi);
    return t != null && joined.resolve(t.json) ? t : null;
  }

  /** The column names an expression reads, into {@code out}. */
  private static void columnsOf(JsonNode node, Set<String> out) {
    if (node.has("col")) out.add(node.get("col").asText());
    for (JsonNode child : node) {
      if (child.isContainerNode()) columnsOf(child, out);
    }
  }

  /** One task reads the whole scan: its aggregate, top-N and limit are final. A joined scan by
   *  its split rule; a single table's by JoinedTables.splitTable (it matters only when an
   *  aggregate, top-N or limit is pushed: see {@link #oneTaskTable}). */
  private boolean oneTask() {
    return (Integer) (joined.joined() ? joined.split() : tableSplit())[0] < 0;
  }

  /** How a single table's scan is split (a conf read and a look at the cluster: once). */
  private Object[] tableSplit() {
    if (tableSplit == null) tableSplit = JoinedTables.splitTable(stats);
    return tableSplit;
  }

  /** A single table read in one task, all its partitions in one DuckDB query (or one source
   *  query): only worth it when what is pushed above the rows is then final — a complete
   *  aggregate, or a top-N or limit without one (a partial aggregate, as for an AVG Spark
   *  finishes itself, keeps one task per partition). */
  private boolean oneTaskTable() {
    boolean finalTop = aggregated != null ? completeAggregation : orderKeys != null || limit >= 0;
    return !joined.joined() && finalTop && oneTask();
  }

  // --- aggregates -------------------------------------------------------------------------------

  /**
   * Complete when the scan is one task and every function is one the reader computes exactly as
   * Spark's final value. Spark asks first with the query's own AVGs (V2ScanRelationPushDown
   * rewriteAggregate), and a single table's AVG is taken whole when the reader can give Spark's
   * exact value: over a decimal(p, s) with 11 < p <= 28 ({@link #exactAverageInput}), rendered as
   * Spark's Average evaluates it (htap.rewrite.render {@code divide}). Any other AVG of a single
   * table is refused, and so is the SUM and COUNT Spark then splits it into and offers again:
   * Spark keeps its own Aggregate with the AVG above per-partition partial sums and counts (which
   * the whole-subtree strategy takes into one task when one task loses no parallelism). A joined
   * scan takes no AVG and not the split Spark then offers either (see {@link #aggregate}), also
   * when it is refused for being split.
   */
  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    if (averageSplit) return false;
    boolean complete = oneTask();
    boolean average = false;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      if (f instanceof Avg) {
        average = true;
        if (joined.joined() || exactAverageInput((Avg) f, SQLConf.get().ansiEnabled()) == null) complete = false;
        continue;
      }
      boolean ok = f instanceof CountStar || f instanceof Count || f instanceof Min || f instanceof Max
          || (f instanceof Sum && !((Sum) f).isDistinct());
      if (!ok) complete = false;
    }
    // Refused with an AVG in it, for any reason (several tasks too): Spark asks again with the
    // AVG split into SUM and COUNT, which a joined scan must recognize and refuse.
    if (!complete && average) averageSplit = true;
    return complete;
  }

  /**
   * The translated input of a single table's AVG the reader computes exactly, or null. Only over
   * a decimal(p, s) with 11 < p <= 28, not DISTINCT, the rule of the whole-subtree renderer
   * (PlanTranslator {@code average}): Spark's Average of it is {@code if (count = 0) null else
   * sum / cast(count as decimal(20,0))}, its sum a decimal(p + 10, s), the division rounded
   * HALF_UP to decimal(p + 4, s + 4), neither type cut by the 38-digit bound (p <= 28). An AVG of
   * integers or doubles sums in DOUBLE (its rounding depends on the order rows are added in), and
   * with p <= 11 Spark's DecimalAggregates rule (which runs after scan pushdown) would average
   * the unscaled values in DOUBLE itself: both stay Spark's.
   */
  private ExprTranslator.Typed exactAverageInput(Avg f, boolean ansi) {
    if (f.isDistinct() || joined.joined()) return null;
    ExprTranslator.Typed t = translate(f.column(), ansi, new HashSet<>());
    if (t == null || !(t.type instanceof DecimalType)) return null;
    int p = ((DecimalType) t.type).precision();
    return p <= 11 || p > 28 ? null : t;
  }

  /** Spark's AVG result type over an input {@link #exactAverageInput} accepted. */
  private static DataType exactAverageType(ExprTranslator.Typed input) {
    DecimalType d = (DecimalType) input.type;
    return DataTypes.createDecimalType(d.precision() + 4, d.scale() + 4);
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    return attempt("aggregate pushdown", aggregation, () -> aggregate(aggregation));
  }

  private boolean aggregate(Aggregation aggregation) {
    if (joined.joined() && averageSplit) {
      // Spark's rewrite of an AVG into SUM and COUNT over a pushed join names the column by its
      // name before the join's aliases (a self-join's SUM(c) for the second side's c_1): the
      // rewritten aggregation cannot be trusted. Spark keeps its aggregate (the whole-subtree
      // strategy may then take it, by expression ids).
      return false;
    }
    boolean ansi = SQLConf.get().ansiEnabled();
    boolean complete = supportCompletePushDown(aggregation);
    Aggregated agg = new Aggregated();
    StructType schema = new StructType();
    int g = 0;
    for (Expression e : aggregation.groupByExpressions()) {
      ExprTranslator.Typed t = translate(e, ansi, agg.inputs);
      if (t == null) return false;
      String col = ExprTranslator.column(e);
      boolean named = col != null && has(col) && !joined.joined() && !schema.getFieldIndex(col).isDefined();
      String name = named ? col : "group" + g;  // a column grouped by twice (DISTINCT a, a): named once
      agg.groupBy.add(t.json);
      agg.exprs.add(Ir.named(name, t.json.deepCopy()));
      schema = schema.add(name, t.type, true);
      g++;
    }
    int i = 0;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      ObjectNode out;
      DataType type;
      if (f instanceof CountStar) {
        type = DataTypes.LongType;
        out = Ir.agg("count_star", false, type);
      } else if (f instanceof Count && (!((Count) f).isDistinct() || complete)) {
        ExprTranslator.Typed in = translate(((Count) f).column(), ansi, agg.inputs);
        if (in == null) return false;
        type = DataTypes.LongType;
        out = Ir.agg("count", ((Count) f).isDistinct(), type, in.json);
      } else if (f instanceof Sum && !((Sum) f).isDistinct()) {
        ExprTranslator.Typed in = translate(((Sum) f).column(), ansi, agg.inputs);
        type = in == null ? null : complete ? completeSumType(in.type) : partialSumType(in.type);
        if (type == null) return false;
        out = Ir.agg("sum", false, type, in.json);
      } else if (f instanceof Min || f instanceof Max) {
        ExprTranslator.Typed in = translate(f instanceof Min ? ((Min) f).column() : ((Max) f).column(), ansi, agg.inputs);
        if (in == null) return false;
        type = in.type;
        out = Ir.agg(f instanceof Min ? "min" : "max", false, type, in.json);
      } else if (f instanceof Avg && complete) {
        // Spark's Average of a decimal(p, s): if (count = 0) null else sum / cast(count as
        // decimal(20, 0)), rounded HALF_UP to decimal(p + 4, s + 4); the plan's decimal "/" is
        // exactly that (NULL for a zero divisor).
        ExprTranslator.Typed in = exactAverageInput((Avg) f, ansi);
        if (in == null) return false;
        columnsOf(in.json, agg.inputs);
        type = exactAverageType(in);
        DecimalType d = (DecimalType) in.type;
        ObjectNode sum = Ir.agg("sum", false, DataTypes.createDecimalType(d.precision() + 10, d.scale()), in.json);
        ObjectNode count = Ir.call("cast", DataTypes.createDecimalType(20, 0),
            Ir.agg("count", false, DataTypes.LongType, in.json.deepCopy()));
        out = Ir.call("/", type, sum, count);
      } else {
        return false;
      }
      agg.exprs.add(Ir.named("agg" + i, out));
      schema = schema.add("agg" + i++, type, true);
    }
    aggregated = agg;
    pushedAggregation = aggregation;
    completeAggregation = complete;
    outputSchema = schema;
    return true;
  }

  private boolean has(String col) {
    for (String name : tableSchema.fieldNames()) {
      if (name.equals(col)) return true;
    }
    return false;
  }

  /**
   * The type a pushed partial SUM is reported in, or null if not pushed. Spark casts every
   * partial decimal sum to the input's own DECIMAL(p, s) before its final SUM, so that is the
   * type reported, and the reader splits a partial sum too large for it into several rows
   * (htap.pushdown.partials); a wider type would overflow in that cast.
   */
  private static DataType partialSumType(DataType t) {
    if (t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType || t instanceof LongType) {
      return DataTypes.LongType;
    }
    if (t instanceof FloatType || t instanceof DoubleType) {
      return DataTypes.DoubleType;
    }
    if (t instanceof DecimalType) {
      return t;
    }
    return null;
  }

  /** Spark's own result type of SUM (a complete aggregate is handed over as the final value). */
  private static DataType completeSumType(DataType t) {
    if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return DataTypes.createDecimalType(Math.min(DecimalType.MAX_PRECISION(), d.precision() + 10), d.scale());
    }
    return partialSumType(t);
  }

  // --- top-N and limit --------------------------------------------------------------------------

  /**
   * ORDER BY ... LIMIT n in the reader. Keys over the scan's columns, or (after a pushed
   * aggregate) the aggregate's own outputs by position. Final only in one task with a complete
   * aggregate or none; otherwise each task keeps its top n and Spark sorts again.
   */
  @Override
  public boolean pushTopN(SortOrder[] orders, int n) {
    return attempt("top-N pushdown", java.util.Arrays.toString(orders) + " LIMIT " + n, () -> topN(orders, n));
  }

  private boolean topN(SortOrder[] orders, int n) {
    if (aggregated != null && !completeAggregation) return false;
    boolean ansi = SQLConf.get().ansiEnabled();
    List<ObjectNode> keys = new ArrayList<>();
    Set<String> reads = new LinkedHashSet<>();
    for (SortOrder o : orders) {
      ObjectNode expr;
      if (aggregated != null) {
        int at = outputPosition(o.expression());
        if (at < 0) return false;
        expr = Ir.col(outputSchema.fields()[at].name(), outputSchema.fields()[at].dataType());
      } else {
        ExprTranslator.Typed t = translate(o.expression(), ansi, reads);
        if (t == null || !orderable(t.type)) return false;
        expr = t.json;
      }
      keys.add(Ir.key(expr, o.direction() == SortDirection.ASCENDING, o.nullOrdering() == NullOrdering.NULLS_FIRST));
    }
    orderKeys = keys;
    keyColumns.addAll(reads);
    limit = n;
    return true;
  }

  private static boolean orderable(DataType t) {
    return t instanceof NumericType || t instanceof StringType || t instanceof BooleanType || t instanceof DateType
        || t instanceof TimestampType || t instanceof TimestampNTZType;
  }

  /** Position of a sort key among the pushed aggregate's outputs (group keys, then aggregates), or -1. */
  private int outputPosition(Expression e) {
    Expression[] groups = pushedAggregation.groupByExpressions();
    for (int i = 0; i < groups.length; i++) {
      if (groups[i].equals(e) || groups[i].toString().equals(e.toString())) return i;
    }
    AggregateFunc[] aggs = pushedAggregation.aggregateExpressions();
    for (int i = 0; i < aggs.length; i++) {
      if (aggs[i].toString().equals(e.toString())) return groups.length + i;
    }
    return -1;
  }

  @Override
  public boolean pushLimit(int n) {
    return attempt("limit pushdown", "LIMIT " + n, () -> {
      if (aggregated != null && !completeAggregation) return false;
      limit = n;
      return true;
    });
  }

  @Override
  public boolean isPartiallyPushed() {
    return !oneTask() || (aggregated != null && !completeAggregation);
  }

  // --- the scan ---------------------------------------------------------------------------------

  /**
   * Rows and bytes of the scan's output, from the tables' live deltas: bytes in proportion to
   * the columns read (as Spark estimates a Parquet scan), both scaled by the part of the rows the
   * pushed filter keeps (FilterEstimate), null when unknown. A joined scan
   * reports the bytes it reads (no row count).
   */
  private long[] estimate() {
    if (joined.joined()) {
      long bytes = 0;
      for (JoinedTables.Leaf l : joined.leaves) {
        long b = l.bytesRead();
        if (b < 0) return null;
        bytes += b;
      }
      return new long[] {-1, Math.max(bytes, 1)};
    }
    if (stats == null) return null;
    double all = 0;
    for (StructField f : tableSchema.fields()) all += f.dataType().defaultSize();
    double read = 0;
    for (StructField f : outputSchema.fields()) read += f.dataType().defaultSize();
    double kept = FilterEstimate.selectivity(filter, columns, stats[0]);
    double share = all <= 0 ? 1.0 : Math.min(1.0, Math.max(read, 1) / all);
    long bytes = (long) Math.ceil(stats[1] * share * kept);
    long rows = (long) Math.ceil(stats[0] * kept);
    if (limit >= 0 && aggregated == null) {
      bytes = Math.min(bytes, Math.max(1, (long) limit * Math.max(1, (long) read)));
      rows = Math.min(rows, limit);
    }
    return new long[] {rows, Math.max(bytes, 1), stats.length > 2 ? stats[2] : -1};
  }

  /** What this builder pushed, as the plan the Python source reads (htap.rewrite.pushed). */
  String pushedJson() {
    ArrayNode scans = Ir.MAPPER.createArrayNode();
    ObjectNode root;
    int split;
    if (joined.joined()) {
      joined.scans(scans);
      root = joined.joinNode(0);
      split = (Integer) joined.split()[0];
      if (aggregated == null) {
        List<ObjectNode> outs = new ArrayList<>();
        for (JoinedTables.Out o : joined.outputs) {
          String name = JoinedTables.unique(o.table, o.column);
          outs.add(Ir.named(name, Ir.col(name, o.type)));
        }
        root = project(root, outs);
      }
    } else {
      Set<String> read = new LinkedHashSet<>();
      if (aggregated != null) {
        read.addAll(aggregated.inputs);
      } else {
        for (String c : outputSchema.fieldNames()) read.add(c);
        read.addAll(keyColumns);
      }
      List<String> columns = new ArrayList<>();
      for (String c : tableSchema.fieldNames()) {
        if (read.contains(c)) columns.add(c);
      }
      scans.add(Ir.scan(options.get("table"), columns, filter));
      root = Ir.scanNode(0, columns);
      split = oneTaskTable() ? -1 : 0;
      if (aggregated == null && !columns.equals(List.of(outputSchema.fieldNames()))) {
        // The keys read columns Spark does not want (or Spark wants them in another order):
        // limit first, then the wanted columns.
        if (orderKeys != null || limit >= 0) root = limited(root);
        List<ObjectNode> outs = new ArrayList<>();
        for (StructField f : outputSchema.fields()) outs.add(Ir.named(f.name(), Ir.col(f.name(), f.dataType())));
        return Ir.text(splitTasks(Ir.plan(scans, project(root, outs), split)));
      }
    }
    if (aggregated != null) {
      ObjectNode agg = Ir.node("aggregate", root);
      ArrayNode groups = agg.putArray("group_by");
      for (ObjectNode g : aggregated.groupBy) groups.add(g);
      ArrayNode exprs = agg.putArray("exprs");
      for (ObjectNode e : aggregated.exprs) exprs.add(e);
      if (!completeAggregation) agg.put("partial", true);
      root = agg;
    }
    if (orderKeys != null || limit >= 0) root = limited(root);
    ObjectNode plan = Ir.plan(scans, root, split);
    return Ir.text(joined.joined() ? plan : splitTasks(plan));
  }

  /**
   * A single table's aggregate, top-N or limit split by partitions runs as at most twice the
   * cluster's task slots tasks, each over a run of neighbouring partitions (as a split subtree,
   * SplitSubtree.Split.write): a Python task and a DuckDB query per partition cost more than the
   * slots gain (TPC-H SF 10 Q1: 60 tasks for lineitem's 60 partitions). A plain row scan keeps
   * one task per partition: Spark's operators above it take its partitions as their parallelism.
   * (A system table, without statistics, is read by partitions as it is.)
   */
  private ObjectNode splitTasks(ObjectNode plan) {
    if (plan.has("split") && pushedBeyondJoin() && stats != null) plan.put("split_tasks", 2 * JoinedTables.cores()[0]);
    return plan;
  }

  private ObjectNode limited(ObjectNode child) {
    ObjectNode n = Ir.node("limit", child);
    n.put("limit", limit);
    ArrayNode keys = n.putArray("keys");
    if (orderKeys != null) for (ObjectNode k : orderKeys) keys.add(k);
    return n;
  }

  private static ObjectNode project(ObjectNode child, List<ObjectNode> named) {
    ObjectNode n = Ir.node("project", child);
    ArrayNode exprs = n.putArray("exprs");
    for (ObjectNode e : named) exprs.add(e);
    return n;
  }

  @Override
  public Scan build() {
    String pushed = pushedJson();
    Map<String, String> scanOptions = new HashMap<>(options);
    scanOptions.put("pushed", pushed);
    List<String> names = new ArrayList<>();
    String description;
    if (joined.joined()) {
      scanOptions.put("table", joined.leaves.get(0).qualified);
      for (JoinedTables.Leaf l : joined.leaves) names.add(l.name);
      String how = (String) joined.split()[1];
      description = "HtapScan " + joined.describe() + " [joined inside the scan; " + how
          + (completeAggregation ? "; aggregate complete in the scan" : aggregated != null ? "; partial aggregate" : "")
          + "] pushed=" + pushed;
    } else {
      names.add(tableName);
      String reason = (String) tableSplit()[1];
      String how = "";
      if (oneTaskTable()) {
        how = " [" + reason + (completeAggregation ? "; aggregate complete in the scan" : "") + "]";
      } else if (aggregated != null || orderKeys != null || limit >= 0) {
        how = " [" + (oneTask() ? "split by partitions: Spark finishes an AVG (not of a decimal(p, s) with 11 < p <= 28)"
            + " from partial sums and counts" : reason)
            + (aggregated != null ? "; partial aggregate" : "") + "]";
      }
      description = "HtapScan " + tableName + how + " pushed=" + pushed;
    }
    boolean rowsKnown = aggregated == null && !joined.joined() && limit < 0;
    String partitionColumn = !joined.joined() && stats != null && stats.length > 3 && stats[3] >= 0
        ? tableSchema.fields()[(int) stats[3]].name() : null;
    return new HtapScan(names, outputSchema, scanOptions, description, estimate(), rowsKnown, partitionColumn);
  }
}
