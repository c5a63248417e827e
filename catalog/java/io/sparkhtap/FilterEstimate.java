package io.sparkhtap;

import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.internal.SQLConf;

/**
 * The fraction of a table's rows a pushed filter keeps, estimated from the table's column
 * statistics (htap.replica.column_stats: per column the low and high value, nulls and distinct
 * values of its live deltas). It makes the scan's reported rows and bytes — what Spark's join
 * planning (broadcast or shuffle) and the split rules weigh — those of the rows the scan returns,
 * not of the whole table.
 *
 * <p>The textbook estimates: {@code col = v} keeps 1/distinct, a range the part of [low, high] it
 * covers (values spread evenly), IN a list n/distinct, IS NULL the nulls; conjuncts multiply,
 * OR adds less the overlap, NOT takes the rest. Anything else keeps every row: an estimate may be
 * too high (a slower plan), it is never lowered on a guess (a table broadcast that does not fit).
 * Estimates only plan; no answer depends on them. {@link #CONF} turns them off.
 */
final class FilterEstimate {
  /** Spark conf: "true" (default) scales a scan's estimated rows and bytes by its pushed filter's
   *  estimated selectivity; "false" reports the whole table's. */
  static final String CONF = "spark.htap.filterEstimates";

  /** One column's statistics over the table's live deltas. {@code low}/{@code high} in the
   *  units the column's literals compare in (dates as days, timestamps as microseconds); NaN when
   *  not known (strings). */
  static final class Column {
    final double low;
    final double high;
    final long nulls;
    final long distinct;

    Column(double low, double high, long nulls, long distinct) {
      this.low = low;
      this.high = high;
      this.nulls = nulls;
      this.distinct = distinct;
    }

    boolean ranged() {
      return !Double.isNaN(low) && !Double.isNaN(high);
    }
  }

  /** The bridge's {@code columns} object ({name: [low, high, nulls, distinct]}); empty when absent. */
  static Map<String, Column> parse(JsonNode columns) {
    Map<String, Column> out = new HashMap<>();
    if (columns == null || !columns.isObject()) return out;
    Iterator<Map.Entry<String, JsonNode>> it = columns.fields();
    while (it.hasNext()) {
      Map.Entry<String, JsonNode> e = it.next();
      JsonNode v = e.getValue();
      if (!v.isArray() || v.size() != 4) continue;
      out.put(e.getKey(), new Column(v.get(0).isNumber() ? v.get(0).asDouble() : Double.NaN,
          v.get(1).isNumber() ? v.get(1).asDouble() : Double.NaN, v.get(2).asLong(), v.get(3).asLong()));
    }
    return out;
  }

  /** Whether estimates are on ({@link #CONF}); a {@link Fallbacks.BadSetting} if the value is not a boolean. */
  static boolean enabled() {
    String v = SQLConf.get().getConfString(CONF, "true").trim().toLowerCase(java.util.Locale.ROOT);
    if (!v.equals("true") && !v.equals("false")) {
      throw new Fallbacks.BadSetting(CONF + " must be true or false, not '" + v + "' (whether a scan's row and byte"
          + " estimates see its pushed filter)");
    }
    return v.equals("true");
  }

  /**
   * The fraction of {@code rows} rows the conjuncts keep, in (0, 1]; 1 when nothing is known.
   * Range conjuncts on one column ({@code k >= 5 AND k <= 9}, a BETWEEN) bound one interval
   * together: multiplied as if independent they would keep far too few rows.
   */
  static double selectivity(List<ObjectNode> conjuncts, Map<String, Column> columns, long rows) {
    if (conjuncts.isEmpty() || columns == null || columns.isEmpty() || rows <= 0 || !enabled()) return 1.0;
    List<JsonNode> flat = new ArrayList<>();
    for (ObjectNode c : conjuncts) flatten(c, flat);
    Map<String, Range> ranges = new LinkedHashMap<>();  // column -> the range its range conjuncts allow
    double s = 1.0;
    for (JsonNode c : flat) {
      Bound b = bound(c, columns);
      if (b == null) {
        s *= of(c, columns, rows);
      } else {
        ranges.computeIfAbsent(b.column, k -> new Range()).add(b);
      }
    }
    for (Map.Entry<String, Range> e : ranges.entrySet()) s *= e.getValue().kept(columns.get(e.getKey()), rows);
    return Math.min(1.0, Math.max(s, 1.0 / rows));
  }

  private static void flatten(JsonNode e, List<JsonNode> into) {
    if (e.path("op").asText("").equals("AND")) {
      for (JsonNode a : e.path("args")) flatten(a, into);
    } else {
      into.add(e);
    }
  }

  /** A range conjunct: its column, and the value it bounds it by from above or below. */
  private static final class Bound {
    final String column;
    final double value;
    final boolean upper;
    final boolean strict;  // < or >: the value itself is outside

    Bound(String column, double value, boolean upper, boolean strict) {
      this.column = column;
      this.value = value;
      this.upper = upper;
      this.strict = strict;
    }
  }

  /** The values a column's range conjuncts allow together: one interval, each end open or closed. */
  private static final class Range {
    double from = Double.NEGATIVE_INFINITY;
    double to = Double.POSITIVE_INFINITY;
    boolean fromOpen;
    boolean toOpen;

    void add(Bound b) {
      if (b.upper && (b.value < to || b.value == to && b.strict)) {
        to = b.value;
        toOpen = b.strict;
      } else if (!b.upper && (b.value > from || b.value == from && b.strict)) {
        from = b.value;
        fromOpen = b.strict;
      }
    }

    /** The fraction of rows in the range: the part of [low, high] it covers (values spread evenly). */
    double kept(Column c, long rows) {
      double part;
      if (c.high - c.low <= 0) {  // one value: in the range or not
        boolean in = (c.low > from || c.low == from && !fromOpen) && (c.low < to || c.low == to && !toOpen);
        part = in ? 1.0 : 0.0;
      } else {
        double lo = Math.max(from, c.low);
        double hi = Math.min(to, c.high);
        part = hi < lo ? 0.0 : (hi - lo) / (c.high - c.low);
      }
      return nonNull(c, rows) * part;
    }
  }

  /** {@code col < v}, {@code v <= col}, ... over a column with a known [low, high]; null otherwise. */
  private static Bound bound(JsonNode e, Map<String, Column> columns) {
    String op = e.path("op").asText("");
    JsonNode args = e.path("args");
    if (!(op.equals("<") || op.equals("<=") || op.equals(">") || op.equals(">=")) || args.size() != 2) return null;
    boolean flipped = !args.get(0).has("col");
    JsonNode col = flipped ? args.get(1) : args.get(0);
    JsonNode lit = flipped ? args.get(0) : args.get(1);
    Column c = column(col, columns);
    if (c == null || !c.ranged() || !lit.has("lit")) return null;
    double v = number(lit.get("lit"));
    if (Double.isNaN(v)) return null;
    if (flipped) op = flip(op);
    return new Bound(col.get("col").asText(), v, op.startsWith("<"), op.length() == 1);
  }

  private static double of(JsonNode e, Map<String, Column> columns, long rows) {
    String op = e.path("op").asText("");
    JsonNode args = e.path("args");
    switch (op) {
      case "AND":
        return of(args.get(0), columns, rows) * of(args.get(1), columns, rows);
      case "OR": {
        double a = of(args.get(0), columns, rows);
        double b = of(args.get(1), columns, rows);
        return a + b - a * b;
      }
      case "NOT": {
        double kept = of(args.get(0), columns, rows);
        return kept >= 1.0 ? 1.0 : 1.0 - kept;  // NOT of an unknown keeps every row too
      }
      case "IS_NULL": case "IS_NOT_NULL": {
        Column c = column(args.get(0), columns);
        if (c == null) return 1.0;
        double nulls = Math.min(1.0, (double) c.nulls / rows);
        return op.equals("IS_NULL") ? nulls : 1.0 - nulls;
      }
      case "IN": {
        Column c = column(args.get(0), columns);
        if (c == null || c.distinct <= 0) return 1.0;
        int n = 0;
        for (int i = 1; i < args.size(); i++) {
          if (!args.get(i).has("lit")) return 1.0;
          n++;
        }
        return nonNull(c, rows) * Math.min(1.0, (double) n / c.distinct);
      }
      case "=": case "<=>": case "<>":
        return equality(op, args, columns, rows);
      case "<": case "<=": case ">": case ">=": {  // alone (under OR or NOT): its own range
        Bound b = bound(e, columns);
        if (b == null) return 1.0;
        Range r = new Range();
        r.add(b);
        return r.kept(columns.get(b.column), rows);
      }
      default:
        return 1.0;
    }
  }

  /** {@code =}, {@code <=>} or {@code <>} of a column and a literal (either side). */
  private static double equality(String op, JsonNode args, Map<String, Column> columns, long rows) {
    if (args.size() != 2) return 1.0;
    boolean flipped = !args.get(0).has("col");
    JsonNode col = flipped ? args.get(1) : args.get(0);
    JsonNode lit = flipped ? args.get(0) : args.get(1);
    Column c = column(col, columns);
    if (c == null || !lit.has("lit") || lit.get("lit").path("type").asText().equals("null")) return 1.0;
    double v = number(lit.get("lit"));
    boolean outside = c.ranged() && !Double.isNaN(v) && (v < c.low || v > c.high);
    double eq = outside ? 0.0 : c.distinct > 0 ? 1.0 / c.distinct : 1.0;
    if (eq >= 1.0 && !op.equals("<>")) return 1.0;
    return nonNull(c, rows) * (op.equals("<>") ? 1.0 - eq : eq);
  }

  private static String flip(String op) {
    switch (op) {
      case "<": return ">";
      case "<=": return ">=";
      case ">": return "<";
      case ">=": return "<=";
      default: return op;
    }
  }

  private static double nonNull(Column c, long rows) {
    return Math.max(0.0, 1.0 - Math.min(1.0, (double) c.nulls / rows));
  }

  private static Column column(JsonNode e, Map<String, Column> columns) {
    if (e == null || !e.has("col")) return null;
    return columns.get(e.get("col").asText());
  }

  /** A literal in the units of {@link Column#low}; NaN when it has none (strings, NaN itself). */
  private static double number(JsonNode lit) {
    String type = lit.path("type").asText();
    JsonNode v = lit.get("value");
    try {
      switch (type) {
        case "long": case "double": case "timestamp":
          return v.isNumber() ? v.asDouble() : Double.NaN;
        case "decimal":
          return Double.parseDouble(v.asText());
        case "boolean":
          return v.asBoolean() ? 1.0 : 0.0;
        case "date":
          return LocalDate.parse(v.asText()).toEpochDay();
        case "timestamp_ntz": {
          LocalDateTime at = LocalDateTime.parse(v.asText());
          return at.toEpochSecond(ZoneOffset.UTC) * 1e6 + at.getNano() / 1000;
        }
        default:
          return Double.NaN;
      }
    } catch (RuntimeException e) {
      return Double.NaN;
    }
  }
}
