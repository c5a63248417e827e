package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Max;
import org.apache.spark.sql.connector.expressions.aggregate.Min;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
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
 * Takes Spark's pushed predicates (V2: expressions too), required columns and partial
 * aggregation (over expressions too), hands them to the Python {@code htap} data source as the
 * {@code pushed} option (JSON), and builds Spark's own Python scan with the matching output
 * schema. A predicate that is a simple column comparison goes into {@code filters} (those also
 * prune partitions); other predicates and expressions Spark's semantics allow go into
 * {@code where} as typed expressions (V2Json); anything else stays in Spark.
 */
public class HtapScanBuilder
    implements SupportsPushDownV2Filters, SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final String tableName;
  private final StructType tableSchema;
  private final Map<String, String> options;

  private StructType outputSchema;
  private Predicate[] pushedPredicates = new Predicate[0];
  private final ArrayNode filterJson = PushedJson.MAPPER.createArrayNode();
  private final ArrayNode whereJson = PushedJson.MAPPER.createArrayNode();
  private ObjectNode aggregationJson;

  private final long[] stats;

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
      // The V1 form only when it is the whole predicate: Spark's toV1 can return a V1 filter for
      // part of a compound predicate (for `s LIKE 'x%' OR length(s) > 9` it gave the LIKE alone),
      // and pushing that part as the whole would drop rows. Anything else goes the typed (V2Json)
      // way or stays in Spark.
      scala.Option<Filter> v1 = PredicateUtils.toV1(p);
      ObjectNode json = v1.isDefined() && sameShape(p, v1.get()) ? PushedJson.filter(v1.get()) : null;
      if (json != null) {
        filterJson.add(json);
        pushed.add(p);
        continue;
      }
      V2Json.Typed typed = V2Json.translate(p, tableSchema, ansi);
      if (typed != null && typed.type instanceof BooleanType) {
        whereJson.add(typed.json);
        pushed.add(p);
      } else {
        rest.add(p);
      }
    }
    pushedPredicates = pushed.toArray(new Predicate[0]);
    return rest.toArray(new Predicate[0]);
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
    if (aggregationJson == null) {
      outputSchema = requiredSchema;
    }
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    boolean ansi = SQLConf.get().ansiEnabled();
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    ArrayNode groupBy = json.putArray("group_by");
    ArrayNode aggregates = json.putArray("aggregates");
    StructType schema = new StructType();
    int g = 0;
    for (Expression e : aggregation.groupByExpressions()) {
      String col = PushedJson.column(e);
      if (col != null && has(col)) {
        groupBy.add(col);
        schema = schema.add(col, tableSchema.apply(col).dataType(), true);
      } else {
        V2Json.Typed t = V2Json.translate(e, tableSchema, ansi);
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
      } else if (f instanceof Count && !((Count) f).isDistinct()) {
        if (input(a.put("fn", "count"), ((Count) f).column(), ansi) == null) return false;
        type = DataTypes.LongType;
      } else if (f instanceof Sum && !((Sum) f).isDistinct()) {
        DataType in = input(a.put("fn", "sum"), ((Sum) f).column(), ansi);
        type = in == null ? null : partialSumType(in);
        if (type == null) return false;
      } else if (f instanceof Min || f instanceof Max) {
        type = input(a.put("fn", f instanceof Min ? "min" : "max"), f instanceof Min ? ((Min) f).column() : ((Max) f).column(), ansi);
        if (type == null) return false;
      } else {
        return false;
      }
      schema = schema.add("agg" + i++, type, true);
    }
    aggregationJson = json;
    outputSchema = schema;
    return true;
  }

  /** The aggregate's input into {@code a} ("col", or "arg" for an expression); its type, or null. */
  private DataType input(ObjectNode a, Expression e, boolean ansi) {
    String col = PushedJson.column(e);
    if (col != null && has(col)) {
      a.put("col", col);
      return tableSchema.apply(col).dataType();
    }
    V2Json.Typed t = V2Json.translate(e, tableSchema, ansi);
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

  /**
   * Rows and bytes of the scan's output, from the table's live deltas: bytes in proportion to
   * the columns read (as Spark estimates a Parquet scan), null when unknown.
   */
  private long[] estimate() {
    if (stats == null) return null;
    double all = 0;
    for (StructField f : tableSchema.fields()) all += f.dataType().defaultSize();
    double read = 0;
    for (StructField f : outputSchema.fields()) read += f.dataType().defaultSize();
    long bytes = all <= 0 ? stats[1] : (long) Math.ceil(stats[1] * Math.min(1.0, Math.max(read, 1) / all));
    return new long[] {stats[0], Math.max(bytes, 1)};
  }

  String pushedJson() {
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    json.set("filters", filterJson);
    if (whereJson.size() > 0) json.set("where", whereJson);
    if (aggregationJson != null) {
      json.setAll(aggregationJson);
    } else {
      ArrayNode cols = json.putArray("columns");
      for (String name : outputSchema.fieldNames()) cols.add(name);
    }
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
    return new HtapScan(tableName, outputSchema, scanOptions, "HtapScan " + tableName + " pushed=" + pushed,
        estimate(), aggregationJson == null);
  }
}
