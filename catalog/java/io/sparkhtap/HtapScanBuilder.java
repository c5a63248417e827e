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
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.*;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Takes Spark's pushed filters, required columns and partial aggregation, hands them to the
 * Python {@code htap} data source as the {@code pushed} option (JSON), and builds Spark's own
 * Python scan with the matching output schema. Filters it cannot express stay in Spark.
 */
public class HtapScanBuilder
    implements SupportsPushDownFilters, SupportsPushDownRequiredColumns, SupportsPushDownAggregates {
  private final String tableName;
  private final StructType tableSchema;
  private final Map<String, String> options;

  private StructType outputSchema;
  private Filter[] pushedFilters = new Filter[0];
  private final ArrayNode filterJson = PushedJson.MAPPER.createArrayNode();
  private ObjectNode aggregationJson;

  HtapScanBuilder(String tableName, StructType tableSchema, Map<String, String> options) {
    this.tableName = tableName;
    this.tableSchema = tableSchema;
    this.options = options;
    this.outputSchema = tableSchema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    List<Filter> pushed = new ArrayList<>();
    List<Filter> rest = new ArrayList<>();
    for (Filter f : filters) {
      ObjectNode json = PushedJson.filter(f);
      if (json == null) {
        rest.add(f);
      } else {
        filterJson.add(json);
        pushed.add(f);
      }
    }
    pushedFilters = pushed.toArray(new Filter[0]);
    return rest.toArray(new Filter[0]);
  }

  @Override
  public Filter[] pushedFilters() {
    return pushedFilters;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    if (aggregationJson == null) {
      outputSchema = requiredSchema;
    }
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    ArrayNode groupBy = json.putArray("group_by");
    ArrayNode aggregates = json.putArray("aggregates");
    StructType schema = new StructType();
    for (Expression e : aggregation.groupByExpressions()) {
      String col = PushedJson.column(e);
      if (col == null || !has(col)) return false;
      groupBy.add(col);
      schema = schema.add(col, tableSchema.apply(col).dataType(), true);
    }
    int i = 0;
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      ObjectNode a = aggregates.addObject();
      DataType type;
      if (f instanceof CountStar) {
        a.put("fn", "count_star");
        type = DataTypes.LongType;
      } else if (f instanceof Count && !((Count) f).isDistinct()) {
        String col = PushedJson.column(((Count) f).column());
        if (col == null || !has(col)) return false;
        a.put("fn", "count").put("col", col);
        type = DataTypes.LongType;
      } else if (f instanceof Sum && !((Sum) f).isDistinct()) {
        String col = PushedJson.column(((Sum) f).column());
        if (col == null || !has(col)) return false;
        type = sumType(tableSchema.apply(col).dataType());
        if (type == null) return false;
        a.put("fn", "sum").put("col", col);
      } else if (f instanceof Min || f instanceof Max) {
        Expression child = f instanceof Min ? ((Min) f).column() : ((Max) f).column();
        String col = PushedJson.column(child);
        if (col == null || !has(col)) return false;
        a.put("fn", f instanceof Min ? "min" : "max").put("col", col);
        type = tableSchema.apply(col).dataType();
      } else {
        return false;
      }
      schema = schema.add("agg" + i++, type, true);
    }
    aggregationJson = json;
    outputSchema = schema;
    return true;
  }

  private boolean has(String col) {
    for (String name : tableSchema.fieldNames()) {
      if (name.equals(col)) return true;
    }
    return false;
  }

  /** The type Spark's own partial Sum produces for a column type, or null if not pushed. */
  private static DataType sumType(DataType t) {
    if (t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType || t instanceof LongType) {
      return DataTypes.LongType;
    }
    if (t instanceof FloatType || t instanceof DoubleType) {
      return DataTypes.DoubleType;
    }
    if (t instanceof DecimalType) {
      DecimalType d = (DecimalType) t;
      return DataTypes.createDecimalType(Math.min(DecimalType.MAX_PRECISION(), d.precision() + 10), d.scale());
    }
    return null;
  }

  String pushedJson() {
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    json.set("filters", filterJson);
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
    return new HtapScan(tableName, outputSchema, scanOptions, "HtapScan " + tableName + " pushed=" + pushed);
  }
}
