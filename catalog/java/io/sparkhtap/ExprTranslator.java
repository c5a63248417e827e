package io.sparkhtap;

import java.math.BigDecimal;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;

import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.expressions.Cast;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Extract;
import org.apache.spark.sql.connector.expressions.GeneralScalarExpression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.*;

/**
 * Spark's V2 expressions as the pushed plan's typed expressions (htap.rewrite.pushed), or null
 * for anything whose result could differ from Spark's own: such an expression stays in Spark.
 * The one expression translator: a scan's filters, aggregate inputs, group and sort keys, a
 * join's condition, and every expression of a whole subtree ({@link PlanTranslator} first turns
 * Catalyst expressions into V2 ones with Spark's own V2ExpressionBuilder). Every node carries its Spark result type, derived with Spark's
 * rules, so renderers can cast to exactly that type. Only operations that are exact in Spark and
 * in the target engines are translated: + - * on integers (ANSI mode only: DuckDB and Postgres
 * raise on overflow as ANSI Spark does) and on decimals whose result Spark does not round
 * (precision <= 38, or Spark's 38-digit result keeps the whole scale), comparisons, AND/OR/NOT, IS [NOT] NULL, IN, prefix/suffix/contains
 * matches, CASE WHEN, COALESCE, SUBSTRING with literal positive bounds, YEAR/MONTH/DAY/QUARTER
 * of DATE and TIMESTAMP_NTZ values, ABS, CHAR_LENGTH (code points), CONCAT (NULL if a part is),
 * TRIM/LTRIM/RTRIM of spaces, DATE_ADD and DATE_DIFF of dates, widening casts, and decimal casts
 * to a smaller scale that cannot overflow (rounded HALF_UP, as every target rounds them). No
 * division here (V2 expressions carry no result types; a whole subtree's division is
 * PlanTranslator's, from Catalyst's own), and no case mapping (UPPER/LOWER: Unicode rules differ
 * between engines).
 */
final class ExprTranslator {
  private ExprTranslator() {}

  /** A translated expression and its Spark type. */
  static final class Typed {
    final ObjectNode json;
    final DataType type;

    Typed(ObjectNode json, DataType type) {
      this.json = json;
      this.type = type;
    }
  }

  static Typed translate(Expression e, StructType schema, boolean ansi) {
    if (e instanceof NamedReference) {
      String col = column(e);
      if (col == null) return null;
      for (StructField f : schema.fields()) {
        if (f.name().equals(col)) {
          return new Typed(Ir.col(col, f.dataType()), f.dataType());
        }
      }
      return null;
    }
    if (e instanceof Literal) {
      Literal<?> lit = (Literal<?>) e;
      ObjectNode value = literal(lit.value(), lit.dataType());
      if (value == null) return null;
      ObjectNode n = Ir.MAPPER.createObjectNode();
      n.set("lit", value);
      n.put("type", lit.dataType().catalogString());
      return new Typed(n, lit.dataType());
    }
    if (e instanceof Cast) {
      Cast c = (Cast) e;
      Typed child = translate(c.expression(), schema, ansi);
      if (child == null || !(exactCast(child.type, c.dataType()) || roundingCast(child.type, c.dataType()))) return null;
      return call("cast", c.dataType(), child);
    }
    if (e instanceof Extract) {
      Extract x = (Extract) e;
      Typed child = translate(x.source(), schema, ansi);
      String field = x.field();
      if (child == null || !(child.type instanceof DateType || child.type instanceof TimestampNTZType)) return null;
      if (!(field.equals("YEAR") || field.equals("MONTH") || field.equals("DAY") || field.equals("QUARTER"))) return null;
      Typed t = call("extract", DataTypes.IntegerType, child);
      t.json.put("field", field);
      return t;
    }
    if (!(e instanceof GeneralScalarExpression)) return null;
    GeneralScalarExpression g = (GeneralScalarExpression) e;
    Expression[] kids = g.children();
    Typed[] args = new Typed[kids.length];
    for (int i = 0; i < kids.length; i++) {
      args[i] = translate(kids[i], schema, ansi);
      if (args[i] == null) return null;
    }
    switch (g.name()) {
      case "=": case "<>": case "<=>": case "<": case "<=": case ">": case ">=":
        if (args.length != 2 || !comparable(args[0].type, args[1].type)) return null;
        return call(g.name(), DataTypes.BooleanType, args);
      case "AND": case "OR":
        return booleans(args) && args.length == 2 ? call(g.name(), DataTypes.BooleanType, args) : null;
      case "NOT":
        return booleans(args) && args.length == 1 ? call("NOT", DataTypes.BooleanType, args) : null;
      case "IS_NULL": case "IS_NOT_NULL":
        return args.length == 1 ? call(g.name(), DataTypes.BooleanType, args) : null;
      case "IN":
        for (int i = 1; i < args.length; i++) {
          if (!comparable(args[0].type, args[i].type)) return null;
        }
        return args.length >= 2 ? call("IN", DataTypes.BooleanType, args) : null;
      case "STARTS_WITH": case "ENDS_WITH": case "CONTAINS":
        if (args.length != 2 || !(args[0].type instanceof StringType) || !args[1].json.has("lit")) return null;
        return call(g.name(), DataTypes.BooleanType, args);
      case "+": case "-": case "*":
        if (args.length == 1 && g.name().equals("-")) {
          return numeric(args[0].type) && (ansi || !integral(args[0].type)) ? call("NEG", args[0].type, args) : null;
        }
        if (args.length != 2) return null;
        DataType t = arithmetic(g.name(), args[0].type, args[1].type, ansi);
        return t == null ? null : call(g.name(), t, args);
      case "CASE_WHEN": {
        DataType result = null;
        for (int i = 0; i < args.length; i++) {
          boolean isCondition = i % 2 == 0 && i + 1 < args.length;
          if (isCondition) {
            if (!(args[i].type instanceof BooleanType)) return null;
          } else if (!(args[i].type instanceof NullType)) {
            if (result != null && !result.equals(args[i].type)) return null;
            result = args[i].type;
          }
        }
        return result == null ? null : call("CASE_WHEN", result, args);
      }
      case "COALESCE": {
        DataType result = args.length > 0 ? args[0].type : null;
        for (Typed a : args) {
          if (!a.type.equals(result)) return null;
        }
        return result == null ? null : call("COALESCE", result, args);
      }
      case "ABS":  // integers only under ANSI (non-ANSI Spark wraps abs(MIN_VALUE) around)
        return args.length == 1 && numeric(args[0].type) && (ansi || !integral(args[0].type))
            ? call("ABS", args[0].type, args) : null;
      case "CHAR_LENGTH":  // characters (code points) everywhere
        return args.length == 1 && args[0].type instanceof StringType ? call("CHAR_LENGTH", DataTypes.IntegerType, args) : null;
      case "CONCAT":  // NULL if any part is NULL, as Spark's concat
        if (args.length < 1) return null;
        for (Typed a : args) {
          if (!(a.type instanceof StringType)) return null;
        }
        return call("CONCAT", DataTypes.StringType, args);
      case "TRIM": case "LTRIM": case "RTRIM":  // spaces only, everywhere (not a custom trim string)
        return args.length == 1 && args[0].type instanceof StringType ? call(g.name(), DataTypes.StringType, args) : null;
      case "DATE_ADD":
        return args.length == 2 && args[0].type instanceof DateType && integral(args[1].type) && !(args[1].type instanceof LongType)
            ? call("DATE_ADD", DataTypes.DateType, args) : null;
      case "DATE_DIFF":  // days from the second to the first
        return args.length == 2 && args[0].type instanceof DateType && args[1].type instanceof DateType
            ? call("DATE_DIFF", DataTypes.IntegerType, args) : null;
      case "SUBSTRING":
        if (args.length < 2 || args.length > 3 || !(args[0].type instanceof StringType)) return null;
        for (int i = 1; i < args.length; i++) {
          Integer v = intLiteral(kids[i]);
          if (v == null || v < (i == 1 ? 1 : 0)) return null;
        }
        return call("SUBSTRING", DataTypes.StringType, args);
      default:
        return null;
    }
  }

  static Typed call(String op, DataType type, Typed... args) {
    ObjectNode[] json = new ObjectNode[args.length];
    for (int i = 0; i < args.length; i++) json[i] = args[i].json;
    return new Typed(Ir.call(op, type, json), type);
  }

  /** The column a V2 expression names, or null when it is not a plain top-level column. */
  static String column(Expression e) {
    if (e instanceof NamedReference) {
      String[] names = ((NamedReference) e).fieldNames();
      if (names.length == 1) return names[0];
    }
    return null;
  }

  private static boolean booleans(Typed[] args) {
    for (Typed a : args) {
      if (!(a.type instanceof BooleanType)) return false;
    }
    return true;
  }

  private static boolean integral(DataType t) {
    return t instanceof ByteType || t instanceof ShortType || t instanceof IntegerType || t instanceof LongType;
  }

  private static boolean numeric(DataType t) {
    return integral(t) || t instanceof DecimalType || t instanceof DoubleType || t instanceof FloatType;
  }

  private static boolean comparable(DataType a, DataType b) {
    if (a instanceof NullType || b instanceof NullType) return true;
    if (a instanceof DecimalType && b instanceof DecimalType) return true;  // compared exactly by value
    return a.equals(b) && !(a instanceof BinaryType) && (numeric(a) || a instanceof StringType || a instanceof BooleanType
        || a instanceof DateType || a instanceof TimestampType || a instanceof TimestampNTZType);
  }

  /** Spark's result type of a + - * b (DecimalPrecision without precision loss), or null. */
  static DataType arithmetic(String op, DataType a, DataType b, boolean ansi) {
    if (integral(a) && a.equals(b)) {
      return ansi ? a : null;  // non-ANSI Spark wraps around on overflow; DuckDB and Postgres raise
    }
    if (a instanceof DoubleType && b instanceof DoubleType) {
      return a;
    }
    if (a instanceof DecimalType && b instanceof DecimalType) {
      DecimalType x = (DecimalType) a;
      DecimalType y = (DecimalType) b;
      int p;
      int s;
      if (op.equals("*")) {
        p = x.precision() + y.precision() + 1;
        s = x.scale() + y.scale();
      } else {
        s = Math.max(x.scale(), y.scale());
        p = Math.max(x.precision() - x.scale(), y.precision() - y.scale()) + s + 1;
      }
      if (p <= DecimalType.MAX_PRECISION()) return DataTypes.createDecimalType(p, s);
      // Spark then keeps 38 digits and cuts the scale (allowPrecisionLoss): exact only when the
      // scale it keeps is the whole scale (TPC-H Q1's price * (1 - discount) * (1 + tax)).
      int kept = Math.max(DecimalType.MAX_PRECISION() - (p - s), Math.min(s, 6));
      boolean lossAllowed = SQLConf.get().decimalOperationsAllowPrecisionLoss();
      return lossAllowed && kept == s ? DataTypes.createDecimalType(DecimalType.MAX_PRECISION(), s) : null;
    }
    return null;
  }

  /** Casts whose every value converts exactly (or as IEEE rounding, the same everywhere). */
  static boolean exactCast(DataType from, DataType to) {
    if (from.equals(to)) return true;
    if (integral(from) && integral(to)) return rank(from) <= rank(to);
    if (integral(from) && to instanceof DecimalType) {
      DecimalType d = (DecimalType) to;
      return d.precision() - d.scale() >= digits(from);
    }
    if (from instanceof DecimalType && to instanceof DecimalType) {
      DecimalType x = (DecimalType) from;
      DecimalType y = (DecimalType) to;
      return y.scale() >= x.scale() && y.precision() - y.scale() >= x.precision() - x.scale();
    }
    if ((integral(from) || from instanceof FloatType) && to instanceof DoubleType) return true;
    if (from instanceof DateType && to instanceof TimestampNTZType) return true;
    return false;
  }

  /**
   * A decimal cast to fewer fractional digits with room for the rounding's carry: Spark rounds
   * HALF_UP (ties away from zero), as DuckDB, Postgres and MySQL/MariaDB do when they cast a
   * DECIMAL to a smaller scale, and with at least one more integer digit than the input no value
   * can overflow (so ANSI mode and its absence agree). Spark puts such a cast on both sides of a
   * comparison of two decimals whose common type loses scale (TPC-H Q11's HAVING against its
   * scalar subquery: decimal(38,6) compared as decimal(38,4)).
   */
  static boolean roundingCast(DataType from, DataType to) {
    if (!(from instanceof DecimalType) || !(to instanceof DecimalType)) return false;
    DecimalType x = (DecimalType) from;
    DecimalType y = (DecimalType) to;
    return y.scale() < x.scale() && y.precision() - y.scale() > x.precision() - x.scale();
  }

  private static int rank(DataType t) {
    if (t instanceof ByteType) return 1;
    if (t instanceof ShortType) return 2;
    if (t instanceof IntegerType) return 3;
    return 4;
  }

  private static int digits(DataType t) {
    return new int[] {0, 3, 5, 10, 19}[rank(t)];
  }

  private static Integer intLiteral(Expression e) {
    if (e instanceof Literal && ((Literal<?>) e).value() instanceof Integer) {
      return (Integer) ((Literal<?>) e).value();
    }
    return null;
  }

  /** A V2 literal (Spark's internal representation) as the JSON literal of htap.rewrite.pushed. */
  static ObjectNode literal(Object v, DataType t) {
    ObjectNode n = Ir.MAPPER.createObjectNode();
    if (v == null) {
      return n.put("type", "null");
    }
    if (t instanceof BooleanType) return n.put("type", "boolean").put("value", (Boolean) v);
    if (integral(t)) return n.put("type", "long").put("value", ((Number) v).longValue());
    if (t instanceof DoubleType || t instanceof FloatType) {
      // NaN and the infinities as text (JSON has no such numbers); MySQL holds neither, and its
      // dialect decides comparisons with them from Spark's order (htap.rewrite.dialects).
      double d = ((Number) v).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) return n.put("type", "double").put("value", Double.toString(d));
      return n.put("type", "double").put("value", d);
    }
    if (t instanceof DecimalType) {
      BigDecimal d = v instanceof Decimal ? ((Decimal) v).toJavaBigDecimal() : (BigDecimal) v;
      return n.put("type", "decimal").put("value", d.toPlainString());
    }
    if (t instanceof StringType) return n.put("type", "string").put("value", v.toString());
    if (t instanceof DateType) return n.put("type", "date").put("value", LocalDate.ofEpochDay(((Number) v).intValue()).toString());
    if (t instanceof TimestampType) return n.put("type", "timestamp").put("value", ((Number) v).longValue());
    if (t instanceof TimestampNTZType) {
      long micros = ((Number) v).longValue();
      LocalDateTime at = LocalDateTime.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          (int) Math.floorMod(micros, 1_000_000L) * 1000, ZoneOffset.UTC);
      return n.put("type", "timestamp_ntz").put("value", at.toString());
    }
    return null;
  }
}
