package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.AttributeReference$;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.DecimalDivideWithOverflowCheck;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Like;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.ScalarSubquery;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
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
import org.apache.spark.sql.catalyst.expressions.DynamicPruning;
import org.apache.spark.sql.catalyst.plans.logical.GlobalLimit;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LocalLimit;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.util.V2ExpressionBuilder;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.*;

import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A subtree of Spark's optimized logical plan as the pushed tree JSON of htap.rewrite.subplan
 * ({"tree": {"leaves", "root"}}), or null when any part of it cannot be carried exactly: then
 * Spark keeps the node (and the strategy tries its children). Every column is named after its
 * expression id ({@code c<id>}): each node's outputs are distinct and the two sides of a join
 * share none, so a name is unique in every SELECT's scope (the renderer qualifies only join
 * conditions; one subplan may appear twice, e.g. a semi join Spark copied below an aggregate); expressions go through Spark's own
 * V2ExpressionBuilder and {@link V2Json} (the same exactness rules as a single scan), with
 * aggregate functions and uncorrelated scalar subqueries put in as placeholders.
 */
final class SubtreeJson {
  final List<DataSourceV2ScanRelation> leaves = new ArrayList<>();
  private final ArrayNode leafJson = PushedJson.MAPPER.createArrayNode();
  private Map<String, String> reference;  // the first leaf's catalog options: every leaf must have them
  private String referenceCatalog;
  private String snapshotToken;
  private int placeholders;
  private final boolean ansi = SQLConf.get().ansiEnabled();
  /**
   * Columns holding a leaf's pushed partial decimal SUM (or that value widened by a Project).
   * The scan reports such a sum in the input's own DECIMAL(p, s), and Spark casts it to that type
   * before its final SUM; the reader splits a larger partial sum into rows that fit
   * (htap.pushdown.partials), but a tree's leaf hands it over whole, so the cast is dropped there
   * (the SUM above it, DECIMAL(p + 10, s), adds the same total).
   */
  private final Set<Long> partialSums = new HashSet<>();
  final List<String> operators = new ArrayList<>();
  /** Filter conjuncts that cannot be translated but may be applied by Spark above the tree. */
  final List<Expression> residuals = new ArrayList<>();

  /** The tree JSON of {@code plan}, or null. */
  ObjectNode translate(LogicalPlan plan) {
    ObjectNode root = node(plan, true, true);
    if (root == null) return null;
    for (Expression r : residuals) {
      if (!r.references().subsetOf(plan.outputSet())) return null;  // Spark applies it above the tree
    }
    ObjectNode tree = PushedJson.MAPPER.createObjectNode();
    tree.set("leaves", leafJson);
    tree.set("root", root);
    ObjectNode json = PushedJson.MAPPER.createObjectNode();
    json.set("tree", tree);
    return json;
  }

  /** Whether the node's output names a column twice (SQL could not tell the two apart). */
  static boolean duplicates(LogicalPlan p) {
    Set<Long> ids = new HashSet<>();
    for (Attribute a : CollectionConverters.asJava(p.output())) {
      if (!ids.add(a.exprId().id())) return true;
    }
    return false;
  }

  static String name(Attribute a) {
    return "c" + a.exprId().id();
  }

  /**
   * {@code liftable}: every operator between the tree's root and {@code p} passes p's rows and
   * columns on unchanged (filters, projections, and the preserved side of joins), so a filter
   * conjunct here that cannot be translated may be left to Spark above the whole tree.
   */
  private ObjectNode node(LogicalPlan p, boolean top, boolean liftable) {
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    if (duplicates(p)) return null;
    if (p instanceof DataSourceV2ScanRelation) {
      return scan((DataSourceV2ScanRelation) p, n);
    }
    if (p instanceof Project) {
      Project proj = (Project) p;
      ObjectNode child = node(proj.child(), false, liftable);
      if (child == null) return null;
      ArrayNode exprs = named(CollectionConverters.asJava(proj.projectList()), proj.child().output(), false);
      if (exprs == null) return null;
      for (NamedExpression ne : CollectionConverters.asJava(proj.projectList())) {
        Expression e = ne instanceof Alias ? ((Alias) ne).child() : (Expression) ne;
        if (e instanceof Cast && e.dataType() instanceof DecimalType && ((Cast) e).child().dataType() instanceof DecimalType
            && ((DecimalType) e.dataType()).scale() == ((DecimalType) ((Cast) e).child().dataType()).scale()) {
          e = ((Cast) e).child();  // widened to the final SUM's input type
        }
        if (e instanceof AttributeReference && partialSums.contains(((AttributeReference) e).exprId().id())) {
          partialSums.add(ne.exprId().id());
        }
      }
      operators.add("Project");
      n.put("node", "project").set("child", child);
      n.set("exprs", exprs);
      return n;
    }
    if (p instanceof Filter) {
      Filter f = (Filter) p;
      ObjectNode child = node(f.child(), false, liftable);
      if (child == null) return null;
      List<ObjectNode> kept = new ArrayList<>();
      for (Expression conjunct : conjuncts(f.condition())) {
        // Spark's dynamic partition pruning (a runtime filter on a scan, from the other side of a
        // join in this same tree): only drops rows that join would drop, so the tree drops it.
        if (conjunct instanceof DynamicPruning) continue;
        ObjectNode cond = expr(conjunct, f.child().output(), true, false);
        if (cond != null) {
          kept.add(cond);
        } else if (liftable && conjunct.deterministic()) {
          residuals.add(conjunct);
        } else {
          return null;
        }
      }
      if (kept.isEmpty()) return child;
      operators.add("Filter");
      ObjectNode cond = kept.get(0);
      for (int i = 1; i < kept.size(); i++) {
        ObjectNode and = PushedJson.MAPPER.createObjectNode();
        and.put("op", "AND").put("type", "boolean").putArray("args").add(cond).add(kept.get(i));
        cond = and;
      }
      n.put("node", "filter").set("child", child);
      n.set("cond", cond);
      return n;
    }
    if (p instanceof Join) {
      Join j = (Join) p;
      String type = joinType(j.joinType());
      if (type == null) return null;
      Set<Long> ids = new HashSet<>();
      for (Attribute a : CollectionConverters.asJava(j.left().output())) ids.add(a.exprId().id());
      for (Attribute a : CollectionConverters.asJava(j.right().output())) {
        if (!ids.add(a.exprId().id())) return null;  // one id on both sides: names would clash
      }
      boolean leftKept = type.equals("inner") || type.equals("cross") || type.equals("semi") || type.equals("anti")
          || type.equals("left");
      boolean rightKept = type.equals("inner") || type.equals("cross") || type.equals("right");
      ObjectNode left = node(j.left(), false, liftable && leftKept);
      if (left == null) return null;
      ObjectNode right = node(j.right(), false, liftable && rightKept);
      if (right == null) return null;
      n.put("node", "join").put("type", type);
      n.set("left", left);
      n.set("right", right);
      if (j.condition().isDefined()) {
        List<Attribute> both = new ArrayList<>(CollectionConverters.asJava(j.left().output()));
        both.addAll(CollectionConverters.asJava(j.right().output()));
        ObjectNode on = expr(j.condition().get(), CollectionConverters.asScala(both).toList(), true, false);
        if (on == null) return null;
        n.set("on", on);
      } else if (!type.equals("inner") && !type.equals("cross") && !type.equals("semi") && !type.equals("anti")) {
        return null;
      }
      operators.add(j.joinType().sql() + " JOIN");
      return n;
    }
    if (p instanceof Aggregate) {
      Aggregate a = (Aggregate) p;
      ObjectNode child = node(a.child(), false, false);
      if (child == null) return null;
      ArrayNode groups = n.putArray("group_by");
      for (Expression g : CollectionConverters.asJava(a.groupingExpressions())) {
        ObjectNode t = expr(g, a.child().output(), false, false);
        if (t == null) return null;
        groups.add(t);
      }
      ArrayNode exprs = named(CollectionConverters.asJava(a.aggregateExpressions()), a.child().output(), true);
      if (exprs == null || exprs.size() == 0) return null;
      operators.add("Aggregate");
      n.put("node", "aggregate").set("child", child);
      n.set("exprs", exprs);
      return n;
    }
    if (p instanceof Sort) {
      Sort s = (Sort) p;
      if (!top || !s.global()) return null;  // an order below the top means nothing in SQL
      ObjectNode child = node(s.child(), false, false);
      ArrayNode keys = child == null ? null : keys(s);
      if (keys == null) return null;
      operators.add("Sort");
      n.put("node", "sort").set("child", child);
      n.set("keys", keys);
      return n;
    }
    if (p instanceof GlobalLimit && ((GlobalLimit) p).child() instanceof LocalLimit) {
      Integer limit = intLiteral(((GlobalLimit) p).limitExpr());
      LocalLimit local = (LocalLimit) ((GlobalLimit) p).child();
      if (limit == null || !limit.equals(intLiteral(local.limitExpr()))) return null;
      LogicalPlan below = local.child();
      ArrayNode keys = PushedJson.MAPPER.createArrayNode();
      if (below instanceof Sort && ((Sort) below).global()) {
        keys = keys((Sort) below);
        if (keys == null) return null;
        below = ((Sort) below).child();
      }
      ObjectNode child = node(below, false, false);
      if (child == null) return null;
      operators.add(keys.size() > 0 ? "TopN" : "Limit");
      n.put("node", "limit").put("limit", (int) limit).set("child", child);
      n.set("keys", keys);
      return n;
    }
    return null;
  }

  private ObjectNode scan(DataSourceV2ScanRelation r, ObjectNode n) {
    if (!(r.scan() instanceof HtapScan)) return null;
    HtapScan s = (HtapScan) r.scan();
    Map<String, String> opts = new HashMap<>(s.catalogOptions());
    String table = opts.remove("table");
    String pushed = opts.remove("pushed");
    if (table == null || pushed == null || table.startsWith(HtapScanBuilder.SYSTEM_SCHEMA + ".")) return null;
    String catalog = s.tableNames().get(0).substring(0, s.tableNames().get(0).indexOf('.'));
    if (reference == null) {
      reference = opts;
      referenceCatalog = catalog;
      snapshotToken = s.snapshotToken();
    } else if (!reference.equals(opts) || !referenceCatalog.equals(catalog) || !Objects.equals(snapshotToken, s.snapshotToken())) {
      return null;  // another catalog, source, user, route or snapshot: not one query
    }
    List<AttributeReference> output = CollectionConverters.asJava(r.output());
    if (output.isEmpty()) return null;  // no column to name in SQL
    ObjectNode leaf = PushedJson.MAPPER.createObjectNode();
    leaf.put("table", table);
    try {
      leaf.set("pushed", PushedJson.MAPPER.readTree(pushed));
    } catch (Exception e) {
      return null;
    }
    ArrayNode names = n.put("node", "scan").put("leaf", leaves.size()).putArray("output");
    for (AttributeReference a : output) names.add(name(a));
    JsonNode aggregates = leaf.get("pushed").path("aggregates");
    if (!leaf.get("pushed").path("complete").asBoolean(false)) {
      for (AttributeReference a : output) {  // the scan names its aggregates' outputs agg<i>
        if (!a.name().matches("agg[0-9]+") || !(a.dataType() instanceof DecimalType)) continue;
        int i = Integer.parseInt(a.name().substring(3));
        if (i < aggregates.size() && "sum".equals(aggregates.get(i).path("fn").asText())) partialSums.add(a.exprId().id());
      }
    }
    for (JsonNode a : aggregates) {  // a single table's AVG of decimals, computed whole by the leaf
      if ("avg".equals(a.path("fn").asText())) operators.add("AVG");
    }
    leaves.add(r);
    leafJson.add(leaf);
    return n;
  }

  private static List<Expression> conjuncts(Expression e) {
    List<Expression> out = new ArrayList<>();
    if (e instanceof org.apache.spark.sql.catalyst.expressions.And) {
      out.addAll(conjuncts(((org.apache.spark.sql.catalyst.expressions.And) e).left()));
      out.addAll(conjuncts(((org.apache.spark.sql.catalyst.expressions.And) e).right()));
    } else {
      out.add(e);
    }
    return out;
  }

  /** Our name of a join type, or null (ExistenceJoin's own sql() throws: it is asked nothing). */
  private static String joinType(org.apache.spark.sql.catalyst.plans.JoinType t) {
    if (t instanceof org.apache.spark.sql.catalyst.plans.ExistenceJoin) return null;
    switch (t.sql()) {
      case "INNER": return "inner";
      case "CROSS": return "cross";
      case "LEFT OUTER": return "left";
      case "RIGHT OUTER": return "right";
      case "FULL OUTER": return "full";
      case "LEFT SEMI": return "semi";
      case "LEFT ANTI": return "anti";
      default: return null;  // existence joins and anything newer stay in Spark
    }
  }

  private ArrayNode named(List<? extends NamedExpression> list, scala.collection.immutable.Seq<Attribute> input, boolean aggregates) {
    ArrayNode out = PushedJson.MAPPER.createArrayNode();
    for (NamedExpression ne : list) {
      Expression e = (Expression) ne;
      while (e instanceof Alias) e = ((Alias) e).child();  // `x AS a AS b` (a CTE's renamed column)
      if (!(ne instanceof Alias) && !(ne instanceof AttributeReference)) return null;
      ObjectNode t = expr(e, input, false, aggregates);
      if (t == null) return null;
      out.addObject().put("name", "c" + ne.exprId().id()).set("expr", t);
    }
    return out;
  }

  private ArrayNode keys(Sort s) {
    ArrayNode keys = PushedJson.MAPPER.createArrayNode();
    for (SortOrder o : CollectionConverters.asJava(s.order())) {
      ObjectNode e = expr(o.child(), s.child().output(), false, false);
      if (e == null || !orderable(o.child().dataType())) return null;
      keys.addObject().put("asc", o.isAscending()).put("nulls_first", o.nullOrdering().sql().equals("NULLS FIRST")).set("expr", e);
    }
    return keys;
  }

  private static boolean orderable(DataType t) {
    return t instanceof NumericType || t instanceof StringType || t instanceof BooleanType || t instanceof DateType
        || t instanceof TimestampType || t instanceof TimestampNTZType;
  }

  private static Integer intLiteral(Expression e) {
    if (e instanceof Literal && ((Literal) e).value() instanceof Integer) return (Integer) ((Literal) e).value();
    return null;
  }

  /**
   * A Catalyst expression over {@code input} as typed JSON: columns renamed to their ids, then
   * Spark's V2 translation and V2Json's exactness rules; aggregate functions (when allowed) and
   * uncorrelated scalar subqueries over compatible scans as placeholders filled in after.
   */
  private ObjectNode expr(Expression e, scala.collection.immutable.Seq<Attribute> input, boolean predicate, boolean aggregates) {
    int leavesBefore = leaves.size();
    int operatorsBefore = operators.size();
    ObjectNode out = translated(e, input, predicate, aggregates);
    if (out == null) {
      // A scalar subquery inside may have taken leaves before the expression failed: nothing
      // refers to them now (the expression stays in Spark, which reads them itself), so they
      // must neither be read by the tree's query nor count as its scans.
      while (leaves.size() > leavesBefore) {
        leaves.remove(leaves.size() - 1);
        leafJson.remove(leafJson.size() - 1);
      }
      while (operators.size() > operatorsBefore) operators.remove(operators.size() - 1);
    }
    return out;
  }

  private ObjectNode translated(Expression e, scala.collection.immutable.Seq<Attribute> input, boolean predicate, boolean aggregates) {
    Map<String, ObjectNode> slots = new LinkedHashMap<>();
    Map<String, DataType> slotTypes = new LinkedHashMap<>();
    boolean[] failed = {false};
    Expression renamed = unaliased(e).transformDown(new AbstractPartialFunction<Expression, Expression>() {
      @Override
      public boolean isDefinedAt(Expression x) {
        return x instanceof AttributeReference || x instanceof AggregateExpression || x instanceof ScalarSubquery
            || x instanceof Like || x instanceof DecimalDivideWithOverflowCheck || narrowing(x);
      }

      @Override
      public <A1 extends Expression, B1> B1 applyOrElse(A1 x, scala.Function1<A1, B1> fallback) {
        if (x instanceof AttributeReference) {
          @SuppressWarnings("unchecked") B1 r = (B1) ((AttributeReference) x).withName(name((AttributeReference) x));
          return r;
        }
        if (!isDefinedAt(x)) return fallback.apply(x);
        ObjectNode slot = x instanceof AggregateExpression
            ? (aggregates ? aggregate((AggregateExpression) x, input) : null)
            : x instanceof Like ? like((Like) x, input)
            : x instanceof DecimalDivideWithOverflowCheck ? divide((DecimalDivideWithOverflowCheck) x, input, aggregates)
            : x instanceof ScalarSubquery ? subquery((ScalarSubquery) x) : narrowed((Cast) x, input, aggregates);
        if (slot == null) {
          failed[0] = true;
          @SuppressWarnings("unchecked") B1 r = (B1) x;
          return r;
        }
        String name = "__slot" + placeholders++;
        slots.put(name, slot);
        slotTypes.put(name, x.dataType());
        @SuppressWarnings("unchecked") B1 r = (B1) placeholder(name, x.dataType());
        return r;
      }
    });
    if (failed[0]) return null;
    scala.Option<org.apache.spark.sql.connector.expressions.Expression> v2 = new V2ExpressionBuilder(renamed, predicate).build();
    if (v2.isEmpty()) return null;
    StructType schema = new StructType();
    for (Attribute a : CollectionConverters.asJava(input)) schema = schema.add(name(a), a.dataType(), true);
    for (Map.Entry<String, DataType> s : slotTypes.entrySet()) schema = schema.add(s.getKey(), s.getValue(), true);
    V2Json.Typed typed = V2Json.translate(v2.get(), schema, ansi);
    if (typed == null || (predicate && !(typed.type instanceof BooleanType))) return null;
    if (!slots.isEmpty() && !fill(typed.json, slots)) return null;
    return typed.json;
  }

  /**
   * {@code e} without aliases inside it: V2ScanRelationPushDown leaves {@code agg0 AS sum(...)}
   * where an expression above a pushed aggregate used it (TPC-H Q11's {@code sum(...) * 0.001}
   * over a DSv2-joined scan), and Spark's V2 translation knows no alias. An alias only names its
   * child, so the value is the same.
   */
  private static Expression unaliased(Expression e) {
    return e.transformUp(new AbstractPartialFunction<Expression, Expression>() {
      @Override
      public boolean isDefinedAt(Expression x) {
        return x instanceof Alias;
      }

      @Override
      public <A1 extends Expression, B1> B1 applyOrElse(A1 x, scala.Function1<A1, B1> fallback) {
        if (!isDefinedAt(x)) return fallback.apply(x);
        @SuppressWarnings("unchecked") B1 r = (B1) ((Alias) x).child();
        return r;
      }
    });
  }

  private static AttributeReference placeholder(String name, DataType type) {
    return AttributeReference$.MODULE$.apply(name, type, true, Metadata.empty(), NamedExpression$.MODULE$.newExprId(),
        scala.collection.immutable.List$.MODULE$.empty());
  }

  /** Puts each slot's JSON where V2Json left a column of the slot's name; false if one is lost. */
  private static boolean fill(JsonNode node, Map<String, ObjectNode> slots) {
    Set<String> used = new HashSet<>();
    fillInto(node, slots, used);
    return used.size() == slots.size();
  }

  private static void fillInto(JsonNode node, Map<String, ObjectNode> slots, Set<String> used) {
    if (node instanceof ObjectNode) {
      ObjectNode o = (ObjectNode) node;
      if (o.has("col") && slots.containsKey(o.get("col").asText())) {
        String name = o.get("col").asText();
        o.removeAll();
        o.setAll(slots.get(name));
        used.add(name);
        return;
      }
      Iterator<Map.Entry<String, JsonNode>> it = o.fields();
      while (it.hasNext()) fillInto(it.next().getValue(), slots, used);
    } else if (node instanceof ArrayNode) {
      for (JsonNode child : node) fillInto(child, slots, used);
    }
  }

  /** SUM / COUNT / MIN / MAX / AVG (DISTINCT too), no FILTER clause, in Spark's result type. */
  private ObjectNode aggregate(AggregateExpression a, scala.collection.immutable.Seq<Attribute> input) {
    if (a.filter().isDefined() || a.mode() != Complete$.MODULE$) return null;
    AggregateFunction f = a.aggregateFunction();
    if (f instanceof Average) return average(a, (Average) f, input);
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    List<Expression> args = CollectionConverters.asJava(f.children());
    if (f instanceof Sum) {
      DataType in = ((Sum) f).child().dataType();
      boolean ok = in instanceof DecimalType || in instanceof LongType || in instanceof IntegerType
          || in instanceof ShortType || in instanceof ByteType || in instanceof DoubleType;
      if (!ok) return null;
      n.put("agg", "sum");
    } else if (f instanceof Count) {
      if (args.size() != 1) return null;
      n.put("agg", "count");
    } else if (f instanceof Min || f instanceof Max) {
      if (!orderable(args.get(0).dataType())) return null;
      n.put("agg", f instanceof Min ? "min" : "max");
    } else {
      return null;  // the rest: Spark's semantics are its own
    }
    ObjectNode arg = expr(args.get(0), input, false, false);
    if (arg == null) return null;
    n.put("distinct", a.isDistinct()).put("type", f.dataType().catalogString());
    n.putArray("args").add(arg);
    return n;
  }

  /**
   * AVG over decimals as what Spark itself evaluates for it: its evaluateExpression with its sum
   * and count buffers replaced by SUM and COUNT of the same input, i.e. {@code if (count = 0)
   * null else DecimalDivideWithOverflowCheck(sum, cast(count as decimal(20,0)), decimal(p+4,
   * s+4))}, translated like any expression ({@link #divide}). Whatever else Spark evaluates (an
   * average of integers or doubles is a DOUBLE sum, whose rounding depends on the order rows
   * are added in) has no translation and stays in Spark, as do decimals that Spark's
   * DecimalAggregates rule already turned into a DOUBLE average (p + 4 <= 15).
   */
  private ObjectNode average(AggregateExpression a, Average f, scala.collection.immutable.Seq<Attribute> input) {
    if (!(f.child().dataType() instanceof DecimalType)) return null;
    AggregateExpression sum = new Sum(f.child()).toAggregateExpression(a.isDistinct(), scala.Option.empty());
    AggregateExpression count = new Count(CollectionConverters.asScala(List.of(f.child())).toList())
        .toAggregateExpression(a.isDistinct(), scala.Option.empty());
    if (!sum.dataType().equals(f.sum().dataType()) || !count.dataType().equals(f.count().dataType())) return null;
    Expression eval = f.evaluateExpression().transformDown(new AbstractPartialFunction<Expression, Expression>() {
      @Override
      public boolean isDefinedAt(Expression x) {
        return x.semanticEquals(f.sum()) || x.semanticEquals(f.count());
      }

      @Override
      public <A1 extends Expression, B1> B1 applyOrElse(A1 x, scala.Function1<A1, B1> fallback) {
        if (!isDefinedAt(x)) return fallback.apply(x);
        @SuppressWarnings("unchecked") B1 r = (B1) (x.semanticEquals(f.sum()) ? sum : count);
        return r;
      }
    });
    if (!eval.dataType().equals(f.dataType())) return null;
    return expr(eval, input, false, true);
  }

  /**
   * Spark's division of an average's decimal sum by its count (Average's evaluateExpression, and
   * V2ScanRelationPushDown's rewrite of an AVG it pushed as SUM and COUNT: nothing else makes a
   * DecimalDivideWithOverflowCheck). It is Decimal's {@code /} (BigDecimal.divide at scale 39,
   * rounding DOWN) then toPrecision(HALF_UP) at the result's scale; truncating at 39 digits keeps
   * every digit the HALF_UP decision at a scale <= 38 looks at, so the result is the exact
   * quotient rounded HALF_UP (ties away from zero) once: the JSON "/" (htap.rewrite.tree renders
   * it as exact integer arithmetic), NULL for a zero divisor as Spark's {@code if (count = 0)}.
   * Only for a sum of DECIMAL(p + 10, s) divided to DECIMAL(p + 4, s + 4) (so p <= 28; no bound
   * cut either type): an average is no larger than its largest value, so the result cannot
   * overflow and Spark's overflow handling never comes into play.
   */
  private ObjectNode divide(DecimalDivideWithOverflowCheck d, scala.collection.immutable.Seq<Attribute> input, boolean aggregates) {
    if (!(d.left().dataType() instanceof DecimalType) || !(d.right().dataType() instanceof DecimalType)) return null;
    DecimalType sum = (DecimalType) d.left().dataType();
    DecimalType count = (DecimalType) d.right().dataType();
    DecimalType result = d.dataType();
    if (count.scale() != 0 || result.scale() != sum.scale() + 4 || result.precision() + 6 != sum.precision()) return null;
    ObjectNode left = expr(d.left(), input, false, aggregates);
    ObjectNode right = left == null ? null : expr(d.right(), input, false, aggregates);
    if (right == null) return null;
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    n.put("op", "/").put("type", result.catalogString());
    n.putArray("args").add(left).add(right);
    operators.add("AVG");
    return n;
  }

  /**
   * General LIKE (Spark offers no V2 form of it) with a literal pattern whose escape character
   * only escapes '%', '_' or itself (Spark rejects any other use; the targets would not):
   * '%' and '_' mean the same in DuckDB, Postgres and MySQL, rendered with ESCAPE '\'.
   */
  private ObjectNode like(Like l, scala.collection.immutable.Seq<Attribute> input) {
    if (l.escapeChar() != '\\' || !(l.right() instanceof Literal) || !(l.left().dataType() instanceof StringType)) return null;
    Object pattern = ((Literal) l.right()).value();
    if (pattern == null) return null;
    String text = pattern.toString();
    for (int i = 0; i < text.length(); i++) {
      if (text.charAt(i) == '\\') {
        if (i + 1 >= text.length() || "%_\\".indexOf(text.charAt(i + 1)) < 0) return null;
        i++;
      }
    }
    ObjectNode arg = expr(l.left(), input, false, false);
    if (arg == null) return null;
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    n.put("op", "LIKE").put("type", "boolean");
    ArrayNode args = n.putArray("args");
    args.add(arg);
    args.addObject().put("type", "string").putObject("lit").put("type", "string").put("value", text);
    return n;
  }

  /**
   * A cast of a DECIMAL to fewer integer digits at the same scale, as Spark puts on a pushed
   * partial SUM before its final SUM (and on the final SUM of a pushed AVG's partial sums): exact when the value fits; when it does not, ANSI Spark
   * raises and so do the targets (only under ANSI mode).
   */
  private boolean narrowing(Expression x) {
    if (!(x instanceof Cast) || !(ansi || partialSum((Cast) x))) return false;
    DataType from = ((Cast) x).child().dataType();
    DataType to = x.dataType();
    return from instanceof DecimalType && to instanceof DecimalType
        && ((DecimalType) from).scale() == ((DecimalType) to).scale()
        && ((DecimalType) from).precision() > ((DecimalType) to).precision();
  }

  private boolean partialSum(Cast c) {
    return c.child() instanceof AttributeReference && partialSums.contains(((AttributeReference) c.child()).exprId().id());
  }

  private ObjectNode narrowed(Cast c, scala.collection.immutable.Seq<Attribute> input, boolean aggregates) {
    ObjectNode arg = expr(c.child(), input, false, aggregates);
    if (arg == null || partialSum(c)) return arg;
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    n.put("op", "cast").put("type", c.dataType().catalogString());
    n.putArray("args").add(arg);
    return n;
  }

  /** An uncorrelated scalar subquery whose plan is itself a tree over compatible scans. */
  private ObjectNode subquery(ScalarSubquery s) {
    if (!s.outerAttrs().isEmpty() || !s.joinCond().isEmpty()) return null;
    LogicalPlan plan = s.plan();
    if (plan.output().size() != 1) return null;
    ObjectNode root = node(plan, false, false);
    if (root == null) return null;
    operators.add("scalar subquery");
    ObjectNode n = PushedJson.MAPPER.createObjectNode();
    n.set("subquery", root);
    n.put("type", s.dataType().catalogString());
    return n;
  }
}
