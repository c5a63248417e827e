package io.sparkhtap;

import java.math.BigDecimal;
import java.sql.Date;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.sources.*;

/**
 * Spark's pushed filters and aggregate inputs as the JSON the Python reader parses
 * (htap.rewrite.subplan documents the format). Returns null for anything it cannot express, so
 * the caller leaves that filter to Spark: nothing is dropped silently.
 */
final class PushedJson {
  static final ObjectMapper MAPPER = new ObjectMapper();

  private PushedJson() {}

  /** The column a V2 expression names, or null when it is not a plain top-level column. */
  static String column(Expression e) {
    if (e instanceof NamedReference) {
      String[] names = ((NamedReference) e).fieldNames();
      if (names.length == 1) {
        return names[0];
      }
    }
    return null;
  }

  static ObjectNode filter(Filter f) {
    ObjectNode n = MAPPER.createObjectNode();
    if (f instanceof EqualTo) {
      return comparison(n, "eq", ((EqualTo) f).attribute(), ((EqualTo) f).value());
    } else if (f instanceof EqualNullSafe) {
      return comparison(n, "eq_null_safe", ((EqualNullSafe) f).attribute(), ((EqualNullSafe) f).value());
    } else if (f instanceof GreaterThan) {
      return comparison(n, "gt", ((GreaterThan) f).attribute(), ((GreaterThan) f).value());
    } else if (f instanceof GreaterThanOrEqual) {
      return comparison(n, "ge", ((GreaterThanOrEqual) f).attribute(), ((GreaterThanOrEqual) f).value());
    } else if (f instanceof LessThan) {
      return comparison(n, "lt", ((LessThan) f).attribute(), ((LessThan) f).value());
    } else if (f instanceof LessThanOrEqual) {
      return comparison(n, "le", ((LessThanOrEqual) f).attribute(), ((LessThanOrEqual) f).value());
    } else if (f instanceof In) {
      In in = (In) f;
      if (!simple(in.attribute())) return null;
      ArrayNode values = n.putArray("values");
      for (Object v : in.values()) {
        ObjectNode lit = literal(v);
        if (lit == null) return null;
        values.add(lit);
      }
      n.put("op", "in").put("col", in.attribute());
      return n;
    } else if (f instanceof IsNull) {
      return nullCheck(n, "is_null", ((IsNull) f).attribute());
    } else if (f instanceof IsNotNull) {
      return nullCheck(n, "is_not_null", ((IsNotNull) f).attribute());
    } else if (f instanceof StringStartsWith) {
      return comparison(n, "starts_with", ((StringStartsWith) f).attribute(), ((StringStartsWith) f).value());
    } else if (f instanceof StringEndsWith) {
      return comparison(n, "ends_with", ((StringEndsWith) f).attribute(), ((StringEndsWith) f).value());
    } else if (f instanceof StringContains) {
      return comparison(n, "contains", ((StringContains) f).attribute(), ((StringContains) f).value());
    } else if (f instanceof And || f instanceof Or) {
      Filter left = f instanceof And ? ((And) f).left() : ((Or) f).left();
      Filter right = f instanceof And ? ((And) f).right() : ((Or) f).right();
      ObjectNode l = filter(left);
      ObjectNode r = filter(right);
      if (l == null || r == null) return null;
      n.put("op", f instanceof And ? "and" : "or");
      n.putArray("args").add(l).add(r);
      return n;
    } else if (f instanceof Not) {
      ObjectNode child = filter(((Not) f).child());
      if (child == null) return null;
      n.put("op", "not").set("arg", child);
      return n;
    }
    return null;
  }

  private static boolean simple(String attribute) {
    // Nested fields arrive dotted; quoted names with dots arrive back-quoted. Both stay in Spark.
    return !attribute.contains(".") && !attribute.contains("`");
  }

  private static ObjectNode comparison(ObjectNode n, String op, String attribute, Object value) {
    if (!simple(attribute)) return null;
    ObjectNode lit = literal(value);
    if (lit == null) return null;
    n.put("op", op).put("col", attribute).set("value", lit);
    return n;
  }

  private static ObjectNode nullCheck(ObjectNode n, String op, String attribute) {
    if (!simple(attribute)) return null;
    n.put("op", op).put("col", attribute);
    return n;
  }

  static ObjectNode literal(Object v) {
    ObjectNode n = MAPPER.createObjectNode();
    if (v == null) {
      n.put("type", "null");
    } else if (v instanceof Boolean) {
      n.put("type", "boolean").put("value", (Boolean) v);
    } else if (v instanceof Byte || v instanceof Short || v instanceof Integer || v instanceof Long) {
      n.put("type", "long").put("value", ((Number) v).longValue());
    } else if (v instanceof Float || v instanceof Double) {
      n.put("type", "double").put("value", ((Number) v).doubleValue());
    } else if (v instanceof BigDecimal) {
      n.put("type", "decimal").put("value", ((BigDecimal) v).toPlainString());
    } else if (v instanceof String) {
      n.put("type", "string").put("value", (String) v);
    } else if (v instanceof Date) {
      n.put("type", "date").put("value", ((Date) v).toLocalDate().toString());
    } else if (v instanceof LocalDate) {
      n.put("type", "date").put("value", v.toString());
    } else if (v instanceof Timestamp) {
      Timestamp t = (Timestamp) v;
      long micros = Math.floorDiv(t.getTime(), 1000L) * 1_000_000L + t.getNanos() / 1000;
      n.put("type", "timestamp").put("value", micros);
    } else if (v instanceof Instant) {
      Instant t = (Instant) v;
      n.put("type", "timestamp").put("value", t.getEpochSecond() * 1_000_000L + t.getNano() / 1000);
    } else if (v instanceof LocalDateTime) {
      n.put("type", "timestamp_ntz").put("value", v.toString());
    } else {
      return null;
    }
    return n;
  }
}
