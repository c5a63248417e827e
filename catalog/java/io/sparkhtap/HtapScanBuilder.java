package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
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
import org.apache.spark.sql.internal.connector.PredicateUtils;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.Not;
import org.apache.spark.sql.sources.Or;
import org.apache.spark.sql.types.*;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Takes Spark's pushed predicates (V2: expressions too), required columns, joins with other HTAP
 * tables of the same catalog and source, partial (or complete) aggregation (over expressions
 * too), top-N and limit; hands them to the Python {@code htap} data source as the {@code pushed}
 * option (JSON), and builds Spark's own Python scan with the matching output schema. A predicate
 * that is a simple column comparison goes into {@code filters} (those also prune partitions);
 * other predicates and expressions Spark's semantics allow go into {@code where} as typed
 * expressions (V2Json); anything else stays in Spark.
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
  private final ArrayNode filterJson = PushedJson.MAPPER.createArrayNode();
  private final ArrayNode whereJson = PushedJson.MAPPER.createArrayNode();
  private ObjectNode aggregationJson;
  private Aggregation pushedAggregation;
  private boolean completeAggregation;
  private boolean averageSplit;  // an AVG refused as complete: Spark asks again with SUM and COUNT
  private ArrayNode orderJson;
  private int limit = -1;

  private final long[] stats;
  private final JoinedTables joined = new JoinedTables();
  private Object[] tableSplit;  // JoinedTables.splitTable(stats), decided once per builder

  HtapScanBuilder(String tableName, StructType tableSchema, Map<String, String> options, long[] stats) {
    this.tableName = tableName;
    this.tableSchema = tableSchema;
    this.options = options;
    this.stats = stats;
    this.outputSchema = tableSchema;
  }

  @Override
  public Predicate[] pushPredicates(Predicate[] predicates) {
    boolean ansi = SQLConf.get().ansiEnabled();
    List<Predicate> pushed = new ArrayList<>();
    List<Predicate> rest = new ArrayList<>();
    for (Predicate p : predicates) {
      try {
        if (pushPredicate(p, ansi)) {
          pushed.add(p);
          continue;
        }
      } catch (Throwable t) {
        Fallbacks.record("filter pushdown", tableName, p, t);
      }
      rest.add(p);
    }
    pushedPredicates = pushed.toArray(new Predicate[0]);
    return rest.toArray(new Predicate[0]);
  }

  /** Whether {@code p} was translated and taken into the pushed filters. */
  private boolean pushPredicate(Predicate p, boolean ansi) {
    // The V1 form only when it is the whole predicate: Spark's toV1 can return a V1 filter for
    // part of a compound predicate (for `s LIKE 'x%' OR length(s) > 9` it gave the LIKE alone),
    // and pushing that part as the whole would drop rows. Anything else goes the typed (V2Json)
    // way or stays in Spark.
    scala.Option<Filter> v1 = PredicateUtils.toV1(p);
    ObjectNode json = v1.isDefined() && sameShape(p, v1.get()) ? PushedJson.filter(v1.get()) : null;
    if (json != null) {
      filterJson.add(json);
      return true;
    }
    V2Json.Typed typed = V2Json.translate(p, tableSchema, ansi);
    if (typed != null && typed.type instanceof BooleanType) {
      whereJson.add(typed.json);
      return true;
    }
    return false;
  }

  /** Whether the V1 filter {@code f} has every AND/OR/NOT node of {@code p}, down to leaves that
   *  convert on their own (compared by shape, not by value: a NaN literal is never equal). */
  private static boolean sameShape(Predicate p, Filter f) {
    switch (p.name()) {
      case "AND":
        return f instanceof And && sameShape((Predicate) p.children()[0], ((And) f).left())
            && sameShape((Predicate) p.children()[1], ((And) f).right());
      case "OR":
        return f instanceof Or && sameShape((Predicate) p.children()[0], ((Or) f).left())
            && sameShape((Predicate) p.children()[1], ((Or) f).right());
      case "NOT":
        return f instanceof Not && sameShape((Predicate) p.children()[0], ((Not) f).child());
      default:
        return !(f instanceof And || f instanceof Or || f instanceof Not) && PredicateUtils.toV1(p).isDefined();
    }
  }

  @Override
  public Predicate[] pushedPredicates() {
    return pushedPredicates;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    if (aggregationJson == null && !joined.joined()) {
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
    return aggregationJson != null || orderJson != null || limit >= 0;
  }

  /** This builder's tables: itself alone until it is joined. */
  private JoinedTables tables() {
    if (joined.leaves.isEmpty()) {
      String qualified = options.get("table");
      joined.leaves.add(new JoinedTables.Leaf(tableName, qualified, tableSchema, filterJson, whereJson, stats));
      for (StructField f : tableSchema.fields()) {
        joined.outputs.add(new JoinedTables.Out(f.name(), 0, f.name(), f.dataType()));
      }
    }
    return joined;
  }

  @Override
  public boolean pushDownJoin(SupportsPushDownJoin other, JoinType joinType, ColumnWithAlias[] leftColumns,
                              ColumnWithAlias[] rightColumns, Predicate condition) {
    try {
      return join(other, joinType, leftColumns, rightColumns, condition);
    } catch (Throwable t) {
      Fallbacks.record("join pushdown", tableName, joinType + " ON " + condition, t);
      return false;
    }
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
    V2Json.Typed on = V2Json.translate(condition, result.outputSchema(), SQLConf.get().ansiEnabled());
    if (on == null || !(on.type instanceof BooleanType) || !result.resolve(on.json)) return false;
    String stepType = !flip ? type : type.equals("left") ? "right" : type.equals("right") ? "left" : type;
    ObjectNode step = PushedJson.MAPPER.createObjectNode();
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

  /** A V2 expression over this scan's relation (the table, or the joined relation) as typed JSON. */
  private V2Json.Typed translate(Expression e, boolean ansi) {
    if (!joined.joined()) return V2Json.translate(e, tableSchema, ansi);
    V2Json.Typed t = V2Json.translate(e, joined.outputSchema(), ansi);
    return t != null && joined.resolve(t.json) ? t : null;
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
    boolean finalTop = aggregationJson != null ? completeAggregation : orderJson != null || limit >= 0;
    return !joined.joined() && finalTop && oneTask();
  }

  // --- aggregates -------------------------------------------------------------------------------

  /**
   * Complete when the scan is one task and every function is one the reader computes exactly as
   * Spark's final value. Spark asks first with the query's own AVGs (V2ScanRelationPushDown
   * rewriteAggregate), and a single table's AVG is taken whole when the reader can give Spark's
   * exact value: over a decimal(p, s) with 11 < p <= 28 ({@link #exactAverageInput}), rendered as
   * Spark's Average evaluates it (htap.rewrite.render {@code divide}). Any other AVG of a single
   * table is refused, and so is the SUM and COUNT Spark then splits it into and offers again: a
   * Project dividing complete sums above the scan is a shape the whole-subtree strategy does not
   * take, so Spark keeps its own Aggregate with the AVG above per-partition partial sums and
   * counts. A joined scan takes that split as complete (Spark divides above it).
   */
  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    if (!oneTask() || averageSplit) return false;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      if (f instanceof Avg && !joined.joined()) {
        if (exactAverageInput((Avg) f, SQLConf.get().ansiEnabled()) != null) continue;
        averageSplit = true;
        return false;
      }
      boolean ok = f instanceof CountStar || f instanceof Count || f instanceof Min || f instanceof Max
          || (f instanceof Sum && !((Sum) f).isDistinct());
      if (!ok) return false;
    }
    return true;
  }

  /**
   * The translated input of a single table's AVG the reader computes exactly, or null. Only over
   * a decimal(p, s) with 11 < p <= 28, not DISTINCT, the rule of the whole-subtree renderer
   * (SubtreeJson {@code average}): Spark's Average of it is {@code if (count = 0) null else
   * sum / cast(count as decimal(20,0))}, its sum a decimal(p + 10, s), the division rounded
   * HALF_UP to decimal(p + 4, s + 4), neither type cut by the 38-digit bound (p <= 28). An AVG of
   * integers or doubles sums in DOUBLE (its rounding depends on the order rows are added in), and
   * with p <= 11 Spark's DecimalAggregates rule (which runs after scan pushdown) would average
   * the unscaled values in DOUBLE itself: both stay Spark's.
   */
  private V2Json.Typed exactAverageInput(Avg f, boolean ansi) {
    if (f.isDistinct() || joined.joined()) return null;
    V2Json.Typed t = translate(f.column(), ansi);
    if (t == null || !(t.type instanceof DecimalType)) return null;
    int p = ((DecimalType) t.type).precision();
    return p <= 11 || p > 28 ? null : t;
  }

  /** Spark's AVG result type over an input {@link #exactAverageInput} accepted. */
  private static DataType exactAverageType(V2Json.Typed input) {
    DecimalType d = (DecimalType) input.type;
    return DataTypes.createDecimalType(d.precision() + 4, d.scale() + 4);
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    try {
      return aggregate(aggregation);
    } catch (Throwable t) {
      Fallbacks.record("aggregate pushdown", tableName, aggregation, t);
      return false;
    }
  }

  private boolean aggregate(Aggregation aggregation) {
    boolean ansi = SQLConf.get().ansiEnabled();
    boolean complete = supportCompletePushDown(aggregation);
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    ArrayNode groupBy = json.putArray("group_by");
    ArrayNode aggregates = json.putArray("aggregates");
    StructType schema = new StructType();
    int g = 0;
    for (Expression e : aggregation.groupByExpressions()) {
      String col = PushedJson.column(e);
      if (col != null && has(col) && !joined.joined()) {
        groupBy.add(col);
        schema = schema.add(col, tableSchema.apply(col).dataType(), true);
      } else {
        V2Json.Typed t = translate(e, ansi);
        if (t == null) return false;
        groupBy.add(t.json);
        schema = schema.add("group" + g, t.type, true);
      }
      g++;
    }
    int i = 0;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      ObjectNode a = aggregates.addObject();
      DataType type;
      if (f instanceof CountStar) {
        a.put("fn", "count_star");
        type = DataTypes.LongType;
      } else if (f instanceof Count && (!((Count) f).isDistinct() || complete)) {
        a.put("fn", ((Count) f).isDistinct() ? "count_distinct" : "count");
        if (input(a, ((Count) f).column(), ansi) == null) return false;
        type = DataTypes.LongType;
      } else if (f instanceof Sum && !((Sum) f).isDistinct()) {
        DataType in = input(a.put("fn", "sum"), ((Sum) f).column(), ansi);
        type = in == null ? null : complete ? completeSumType(in) : partialSumType(in);
        if (type == null) return false;
      } else if (f instanceof Min || f instanceof Max) {
        type = input(a.put("fn", f instanceof Min ? "min" : "max"), f instanceof Min ? ((Min) f).column() : ((Max) f).column(), ansi);
        if (type == null) return false;
      } else if (f instanceof Avg && complete) {
        // Always typed ("arg"): the reader divides at the input's scale, to Spark's result type.
        V2Json.Typed t = exactAverageInput((Avg) f, ansi);
        if (t == null) return false;
        type = exactAverageType(t);
        a.put("fn", "avg").put("type", type.catalogString()).set("arg", t.json);
      } else {
        return false;
      }
      schema = schema.add("agg" + i++, type, true);
    }
    if (complete) json.put("complete", true);
    aggregationJson = json;
    pushedAggregation = aggregation;
    completeAggregation = complete;
    outputSchema = schema;
    return true;
  }

  /** The aggregate's input into {@code a} ("col", or "arg" for an expression); its type, or null. */
  private DataType input(ObjectNode a, Expression e, boolean ansi) {
    String col = PushedJson.column(e);
    if (col != null && has(col) && !joined.joined()) {
      a.put("col", col);
      return tableSchema.apply(col).dataType();
    }
    V2Json.Typed t = translate(e, ansi);
    if (t == null) return null;
    a.set("arg", t.json);
    return t.type;
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
    try {
      return topN(orders, n);
    } catch (Throwable t) {
      Fallbacks.record("top-N pushdown", tableName, java.util.Arrays.toString(orders) + " LIMIT " + n, t);
      return false;
    }
  }

  private boolean topN(SortOrder[] orders, int n) {
    if (aggregationJson != null && !completeAggregation) return false;
    boolean ansi = SQLConf.get().ansiEnabled();
    ArrayNode keys = PushedJson.MAPPER.createArrayNode();
    for (SortOrder o : orders) {
      ObjectNode k = keys.addObject();
      if (aggregationJson != null) {
        int at = outputPosition(o.expression());
        if (at < 0) return false;
        k.put("output", at);
      } else {
        V2Json.Typed t = translate(o.expression(), ansi);
        if (t == null || !orderable(t.type)) return false;
        k.set("expr", t.json);
      }
      k.put("asc", o.direction() == SortDirection.ASCENDING);
      k.put("nulls_first", o.nullOrdering() == NullOrdering.NULLS_FIRST);
    }
    orderJson = keys;
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
    if (aggregationJson != null && !completeAggregation) return false;
    limit = n;
    return true;
  }

  @Override
  public boolean isPartiallyPushed() {
    return !oneTask() || (aggregationJson != null && !completeAggregation);
  }

  // --- the scan ---------------------------------------------------------------------------------

  /**
   * Rows and bytes of the scan's output, from the tables' live deltas: bytes in proportion to
   * the columns read (as Spark estimates a Parquet scan), null when unknown. A joined scan
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
    long bytes = all <= 0 ? stats[1] : (long) Math.ceil(stats[1] * Math.min(1.0, Math.max(read, 1) / all));
    if (limit >= 0 && aggregationJson == null) bytes = Math.min(bytes, Math.max(1, (long) limit * Math.max(1, (long) read)));
    return new long[] {stats[0], Math.max(bytes, 1)};
  }

  String pushedJson() {
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    if (joined.joined()) {
      json.set("join", joined.json());
    } else {
      json.set("filters", filterJson);
      if (whereJson.size() > 0) json.set("where", whereJson);
    }
    if (aggregationJson != null) {
      json.setAll(aggregationJson);
    } else if (joined.joined()) {
      ArrayNode select = json.putArray("select");
      for (JoinedTables.Out o : joined.outputs) {
        select.addObject().put("col", o.column).put("table", o.table).put("type", o.type.catalogString());
      }
    } else {
      ArrayNode cols = json.putArray("columns");
      for (String name : outputSchema.fieldNames()) cols.add(name);
    }
    if (orderJson != null) json.set("order", orderJson);
    if (limit >= 0) json.put("limit", limit);
    if (oneTaskTable()) json.put("one_task", true);
    try {
      return PushedJson.MAPPER.writeValueAsString(json);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialize the pushed subplan", e);
    }
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
          + (completeAggregation ? "; aggregate complete in the scan" : aggregationJson != null ? "; partial aggregate" : "")
          + "] pushed=" + pushed;
    } else {
      names.add(tableName);
      String reason = (String) tableSplit()[1];
      String how = "";
      if (oneTaskTable()) {
        how = " [" + reason + (completeAggregation ? "; aggregate complete in the scan" : "") + "]";
      } else if (aggregationJson != null || orderJson != null || limit >= 0) {
        how = " [" + (oneTask() ? "one task per partition: Spark finishes an AVG (not of a decimal(p, s) with 11 < p <= 28)"
            + " from partial sums and counts" : reason)
            + (aggregationJson != null ? "; partial aggregate" : "") + "]";
      }
      description = "HtapScan " + tableName + how + " pushed=" + pushed;
    }
    boolean rowsKnown = aggregationJson == null && !joined.joined() && limit < 0;
    return new HtapScan(names, outputSchema, scanOptions, description, estimate(), rowsKnown);
  }
}
