package io.sparkhtap;

import java.util.List;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.types.DataType;

/**
 * The pushed plan's JSON (htap.rewrite.pushed documents the format, version {@value #VERSION}):
 * one form for everything pushed — a scan's filters, columns, aggregate and top-N, a DSv2 join,
 * a whole subtree. Small builders, so that the translators ({@link ExprTranslator},
 * {@link PlanTranslator}, {@link HtapScanBuilder}) spell each node one way.
 */
final class Ir {
  static final int VERSION = 2;
  static final ObjectMapper MAPPER = new ObjectMapper();

  private Ir() {}

  /** A whole plan: its scans (table reads), root and the scan whose partitions are the tasks (or -1). */
  static ObjectNode plan(ArrayNode scans, ObjectNode root, int split) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("ir", VERSION);
    n.set("scans", scans);
    n.set("root", root);
    if (split >= 0) n.put("split", split);
    return n;
  }

  static String text(JsonNode json) {
    try {
      return MAPPER.writeValueAsString(json);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialize the pushed plan", e);
    }
  }

  static ObjectNode parse(String text) {
    try {
      JsonNode n = MAPPER.readTree(text);
      if (!(n instanceof ObjectNode) || n.path("ir").asInt(-1) != VERSION) {
        throw new IllegalStateException("not a pushed plan of version " + VERSION + ": " + text);
      }
      return (ObjectNode) n;
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("not a pushed plan: " + text, e);
    }
  }

  /** A table read: its columns and its filter's conjuncts. */
  static ObjectNode scan(String table, List<String> columns, List<ObjectNode> filter) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("table", table);
    ArrayNode cols = n.putArray("columns");
    for (String c : columns) cols.add(c);
    ArrayNode f = n.putArray("filter");
    for (ObjectNode c : filter) f.add(c);
    return n;
  }

  static ObjectNode scanNode(int scan, List<String> output) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("node", "scan").put("scan", scan);
    ArrayNode out = n.putArray("output");
    for (String o : output) out.add(o);
    return n;
  }

  static ObjectNode node(String op, ObjectNode child) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("node", op).set("child", child);
    return n;
  }

  static ObjectNode named(String name, ObjectNode expr) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("name", name).set("expr", expr);
    return n;
  }

  static ObjectNode col(String name, DataType type) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("col", name).put("type", type.catalogString());
    return n;
  }

  static ObjectNode call(String op, DataType type, ObjectNode... args) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("op", op).put("type", type.catalogString());
    ArrayNode a = n.putArray("args");
    for (ObjectNode arg : args) a.add(arg);
    return n;
  }

  static ObjectNode agg(String fn, boolean distinct, DataType type, ObjectNode... args) {
    ObjectNode n = MAPPER.createObjectNode();
    n.put("agg", fn).put("distinct", distinct).put("type", type.catalogString());
    ArrayNode a = n.putArray("args");
    for (ObjectNode arg : args) a.add(arg);
    return n;
  }

  static ObjectNode key(ObjectNode expr, boolean asc, boolean nullsFirst) {
    ObjectNode n = MAPPER.createObjectNode();
    n.set("expr", expr);
    n.put("asc", asc).put("nulls_first", nullsFirst);
    return n;
  }

  /** The conjunction of {@code conds} (one of them, or null for none). */
  static ObjectNode and(List<ObjectNode> conds) {
    ObjectNode out = null;
    for (ObjectNode c : conds) out = out == null ? c : call("AND", org.apache.spark.sql.types.DataTypes.BooleanType, out, c);
    return out;
  }

  /** The output column names of a node (as htap.rewrite.pushed Node.columns computes them). */
  static List<String> columns(JsonNode node) {
    List<String> out = new java.util.ArrayList<>();
    String op = node.path("node").asText();
    switch (op) {
      case "scan": case "union": case "expand":
        for (JsonNode o : node.get("output")) out.add(o.asText());
        return out;
      case "project": case "aggregate":
        for (JsonNode e : node.get("exprs")) out.add(e.get("name").asText());
        return out;
      case "window":
        out.addAll(columns(node.get("child")));
        for (JsonNode e : node.get("exprs")) out.add(e.get("name").asText());
        return out;
      case "join": {
        String type = node.get("type").asText();
        out.addAll(columns(node.get("left")));
        if (type.equals("existence")) out.add(node.get("exists").asText());
        else if (!type.equals("semi") && !type.equals("anti")) out.addAll(columns(node.get("right")));
        return out;
      }
      default:
        return columns(node.get("child"));
    }
  }
}
