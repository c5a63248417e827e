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
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.CaseWhen;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Cast$;
import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.Concat;
import org.apache.spark.sql.catalyst.expressions.DayOfMonth;
import org.apache.spark.sql.catalyst.expressions.Length;
import org.apache.spark.sql.catalyst.expressions.Month;
import org.apache.spark.sql.catalyst.expressions.Quarter;
import org.apache.spark.sql.catalyst.expressions.StringTrim;
import org.apache.spark.sql.catalyst.expressions.StringTrimLeft;
import org.apache.spark.sql.catalyst.expressions.StringTrimRight;
import org.apache.spark.sql.catalyst.expressions.Substring;
import org.apache.spark.sql.catalyst.expressions.Year;
import org.apache.spark.sql.catalyst.expressions.If;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Lower;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.StringPredicate;
import org.apache.spark.sql.catalyst.expressions.Upper;
import org.apache.spark.sql.catalyst.expressions.DecimalDivideWithOverflowCheck;
import org.apache.spark.sql.catalyst.expressions.Divide;
import org.apache.spark.sql.catalyst.expressions.EvalMode$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Like;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.ScalarSubquery;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Average;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.expressions.CurrentRow$;
import org.apache.spark.sql.catalyst.expressions.DenseRank;
import org.apache.spark.sql.catalyst.expressions.Lag;
import org.apache.spark.sql.catalyst.expressions.Lead;
import org.apache.spark.sql.catalyst.expressions.Rank;
import org.apache.spark.sql.catalyst.expressions.RowFrame$;
import org.apache.spark.sql.catalyst.expressions.RowNumber;
import org.apache.spark.sql.catalyst.expressions.SpecifiedWindowFrame;
import org.apache.spark.sql.catalyst.expressions.UnboundedFollowing$;
import org.apache.spark.sql.catalyst.expressions.UnboundedPreceding$;
import org.apache.spark.sql.catalyst.expressions.WindowExpression;
import org.apache.spark.sql.catalyst.expressions.WindowSpecDefinition;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Expand;
import org.apache.spark.sql.catalyst.plans.logical.Offset;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.catalyst.plans.logical.Window;
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
 * A subtree of Spark's optimized logical plan as a pushed plan (htap.rewrite.pushed), or null when
 * any part of it cannot be carried exactly: then Spark keeps the node (and the strategy tries its
 * children). Each HTAP scan below is inlined: its own pushed plan (what DSv2 pushed into it) with
 * its scans appended to the plan's. Every column is named after its expression id ({@code
 * c<id>}): each node's outputs are distinct and the two sides of a join share none, so a name is
 * unique in every SELECT's scope (one subplan may appear twice, e.g. a semi join Spark copied
 * below an aggregate); expressions go through Spark's own V2ExpressionBuilder and {@link
 * ExprTranslator} (the same exactness rules as a single scan), with aggregate functions and
 * uncorrelated scalar subqueries put in as placeholders.
 */
final class PlanTranslator {
  final List<DataSourceV2ScanRelation> leaves = new ArrayList<>();
  /** Per leaf: its table's scan index in the plan when the leaf reads one table with nothing
   *  pushed above the read (filters and columns only), else -1 (what {@link SplitSubtree} may split). */
  final List<Integer> leafScans = new ArrayList<>();
  private final ArrayNode scans = Ir.MAPPER.createArrayNode();
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

  /** The pushed plan of {@code plan} (one task), or null. */
  ObjectNode translate(LogicalPlan plan) {
    PlanCheck.injectTranslationFailure();
    ObjectNode root = node(plan, true, true);
    if (root == null) return null;
    for (Expression r : residuals) {
      if (!r.references().subsetOf(plan.outputSet())) return null;  // Spark applies it above the tree
    }
    return Ir.plan(scans, root, -1);
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
    ObjectNode n = Ir.MAPPER.createObjectNode();
    if (duplicates(p)) return null;
    if (p instanceof DataSourceV2ScanRelation) {
      return scan((DataSourceV2ScanRelation) p, n);
    }
    if (p instanceof Project) {
      Project proj = (Project) p;
      int lifted = residuals.size();
      ObjectNode child = node(proj.child(), false, liftable);
      if (child == null) return null;
      if (residuals.size() > lifted && !neverRaise(CollectionConverters.asJava(proj.projectList()))) return null;
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
      int lifted = residuals.size();
      ObjectNode child = node(f.child(), false, liftable);
      if (child == null) return null;
      List<ObjectNode> kept = new ArrayList<>();
      List<Expression> pushedHere = new ArrayList<>();
      for (Expression conjunct : conjuncts(f.condition())) {
        // Spark's dynamic partition pruning (a runtime filter on a scan, from the other side of a
        // join in this same tree): only drops rows that join would drop, so the tree drops it.
        if (conjunct instanceof DynamicPruning) continue;
        ObjectNode cond = expr(conjunct, f.child().output(), true, false);
        if (cond != null) {
          kept.add(cond);
          pushedHere.add(conjunct);
        } else if (liftable && conjunct.deterministic() && !SubqueryExpression.hasSubquery(conjunct)) {
          // Never a conjunct with a subquery: AQE plans subqueries once, from the first physical
          // plan, and re-plans the rest after each stage; a subquery that tree absorbed and a
          // re-planned tree lifts into Spark has no plan ("key not found" in
          // PlanAdaptiveSubqueries: fuzz seed 21 query 123). Such a tree is not taken; its
          // subtrees are offered as before.
          residuals.add(conjunct);
        } else {
          return null;
        }
      }
      // Conjuncts applied in the tree run before those lifted above it (here or below).
      if (residuals.size() > lifted && !neverRaise(pushedHere)) return null;
      if (kept.isEmpty()) return child;
      operators.add("Filter");
      ObjectNode cond = kept.get(0);
      for (int i = 1; i < kept.size(); i++) cond = Ir.call("AND", DataTypes.BooleanType, cond, kept.get(i));
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
          || type.equals("left") || type.equals("existence");
      boolean rightKept = type.equals("inner") || type.equals("cross") || type.equals("right");
      int lifted = residuals.size();
      ObjectNode left = node(j.left(), false, liftable && leftKept);
      if (left == null) return null;
      ObjectNode right = node(j.right(), false, liftable && rightKept);
      if (right == null) return null;
      // A NOT IN whose condition can raise stays in Spark, lifted residual or not: Spark's
      // null-aware anti join never evaluates it once the subquery holds a NULL (no row can
      // pass), where DuckDB or the source evaluates it on every row (fuzz seed 44 query 785:
      // {@code (id + n4) NOT IN (SELECT n4 ...)} over a NULL n4 and a DECIMAL(38) overflow).
      boolean raises = j.condition().isDefined() && !neverRaise(List.of(j.condition().get()));
      if (raises && (residuals.size() > lifted || type.equals("anti") && nullAware(j.condition().get()))) return null;
      n.put("node", "join").put("type", type);
      if (type.equals("existence")) {
        n.put("exists", name(((org.apache.spark.sql.catalyst.plans.ExistenceJoin) j.joinType()).exists()));
      }
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
      operators.add(type.equals("existence") ? "EXISTS" : j.joinType().sql() + " JOIN");
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
      ArrayNode keys = Ir.MAPPER.createArrayNode();
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
    if (p instanceof Offset) return offset((Offset) p);
    if (p instanceof Union) return union((Union) p, n);
    if (p instanceof Window) return window((Window) p, n);
    if (p instanceof Expand) return expand((Expand) p, n);
    return null;
  }

  /** Whether an anti join's condition is NOT IN's null-aware one: {@code a = b OR isnull(a = b)}. */
  private static boolean nullAware(Expression condition) {
    return condition.find(new scala.runtime.AbstractFunction1<Expression, Object>() {
      @Override
      public Object apply(Expression e) {
        return e instanceof IsNull && ((IsNull) e).child() instanceof BinaryComparison;
      }
    }).isDefined();
  }

  /**
   * Whether evaluating these expressions never raises, whatever the row: columns, literals,
   * comparisons, AND/OR/NOT, NULL tests, IN, CASE/IF/COALESCE, string tests, case changes,
   * substrings, lengths, concatenation and trims, date parts, and casts that only widen. Spark evaluates a projection, a join condition or a filter above a
   * filter on the rows that filter keeps; a conjunct lifted above the tree (a residual) is applied
   * after them instead, so they see rows Spark's plan never shows them. Such a node is taken only
   * if nothing in it can raise (an ANSI overflow, a failed cast, a division by zero) on a row
   * Spark's filter would have dropped: fuzz seed 39 query 116, {@code GROUP BY -si5} under an
   * ILIKE on a table holding si5 = -32768. (Filters over a single scan: {@link
   * UntranslatablePredicates}.)
   */
  static boolean neverRaise(Iterable<?> exprs) {
    for (Object o : exprs) {
      Expression e = (Expression) o;
      boolean safe = e instanceof Cast
          ? Cast$.MODULE$.canUpCast(((Cast) e).child().dataType(), e.dataType())
          : e instanceof Attribute || e instanceof Literal || e instanceof Alias || e instanceof BinaryComparison
              || e instanceof And || e instanceof Or || e instanceof Not || e instanceof IsNull || e instanceof IsNotNull
              || e instanceof In || e instanceof InSet || e instanceof CaseWhen || e instanceof If
              || e instanceof Coalesce || e instanceof StringPredicate || e instanceof Upper || e instanceof Lower
              || e instanceof Substring || e instanceof Length || e instanceof Concat || e instanceof StringTrim
              || e instanceof StringTrimLeft || e instanceof StringTrimRight || e instanceof Year || e instanceof Month
              || e instanceof DayOfMonth || e instanceof Quarter;
      if (!safe || !neverRaise(CollectionConverters.asJava(e.children()))) return false;
    }
    return true;
  }

  /**
   * OFFSET m over a LIMIT (Spark's LIMIT n OFFSET m: a global limit of n + m below the offset, a
   * top-N when ordered, as SQL's ORDER BY ... LIMIT n OFFSET m): the limit node takes the offset
   * (the renderer keeps the order of a plan's root). Only over a limit (the limit node of this
   * plan, or of a scan it inlines, below projections): an offset over unordered rows is not pushed.
   */
  private ObjectNode offset(Offset o) {
    Integer skip = intLiteral(o.offsetExpr());
    if (skip == null || skip < 0) return null;
    ObjectNode child = node(o.child(), false, false);
    if (child == null) return null;
    JsonNode limit = child;
    while (limit.path("node").asText().equals("project")) limit = limit.get("child");  // rows unchanged
    if (!limit.path("node").asText().equals("limit")) return null;
    int rows = limit.get("limit").asInt();
    ((ObjectNode) limit).put("limit", Math.max(0, rows - skip));
    ((ObjectNode) limit).put("offset", limit.path("offset").asInt(0) + skip);
    operators.add("Offset");
    return child;
  }

  /** UNION ALL (Spark's Union by position; a distinct UNION is an Aggregate above it). */
  private ObjectNode union(Union u, ObjectNode n) {
    if (u.byName() || u.allowMissingCol()) return null;
    ArrayNode children = Ir.MAPPER.createArrayNode();
    for (LogicalPlan c : CollectionConverters.asJava(u.children())) {
      ObjectNode child = node(c, false, false);
      if (child == null) return null;
      children.add(child);
    }
    n.put("node", "union").set("children", children);
    ArrayNode out = n.putArray("output");
    for (Attribute a : CollectionConverters.asJava(u.output())) out.add(name(a));
    operators.add("UNION ALL");
    return n;
  }

  /**
   * Grouping sets, ROLLUP and CUBE: Spark's Expand (each child row once per projection; the
   * Aggregate above groups by the expanded columns and the grouping id).
   */
  private ObjectNode expand(Expand e, ObjectNode n) {
    ObjectNode child = node(e.child(), false, false);
    if (child == null) return null;
    ArrayNode projections = Ir.MAPPER.createArrayNode();
    for (scala.collection.immutable.Seq<Expression> projection : CollectionConverters.asJava(e.projections())) {
      ArrayNode exprs = projections.addArray();
      for (Expression x : CollectionConverters.asJava(projection)) {
        ObjectNode t = expr(x, e.child().output(), false, false);
        if (t == null) return null;
        exprs.add(t);
      }
    }
    n.put("node", "expand").set("child", child);
    n.set("projections", projections);
    ArrayNode out = n.putArray("output");
    for (Attribute a : CollectionConverters.asJava(e.output())) out.add(name(a));
    operators.add("Expand");
    return n;
  }

  /**
   * Window functions over one partitioning and ordering (Spark's Window node): ROW_NUMBER, RANK,
   * DENSE_RANK, LAG and LEAD (a literal offset, not ignoring NULLs), and SUM / COUNT / MIN / MAX
   * / AVG of decimals over a frame of rows or a range from or to its ends or the current row.
   * The node outputs its child's columns, then one column per window expression.
   */
  private ObjectNode window(Window w, ObjectNode n) {
    ObjectNode child = node(w.child(), false, false);
    if (child == null) return null;
    ArrayNode exprs = n.put("node", "window").putArray("exprs");
    n.set("child", child);
    scala.collection.immutable.Seq<Attribute> input = w.child().output();
    for (NamedExpression ne : CollectionConverters.asJava(w.windowExpressions())) {
      Expression e = ne instanceof Alias ? ((Alias) ne).child() : null;
      if (!(e instanceof WindowExpression)) return null;
      ObjectNode t = windowed((WindowExpression) e, input);
      if (t == null) return null;
      exprs.add(Ir.named(name(ne.toAttribute()), t));
    }
    operators.add("Window");
    return n;
  }

  private ObjectNode windowed(WindowExpression we, scala.collection.immutable.Seq<Attribute> input) {
    WindowSpecDefinition spec = we.windowSpec();
    ObjectNode over = Ir.MAPPER.createObjectNode();
    ArrayNode partition = over.putArray("partition_by");
    for (Expression p : CollectionConverters.asJava(spec.partitionSpec())) {
      ObjectNode t = expr(p, input, false, false);
      if (t == null) return null;
      partition.add(t);
    }
    ArrayNode order = over.putArray("order_by");
    for (SortOrder o : CollectionConverters.asJava(spec.orderSpec())) {
      ObjectNode t = expr(o.child(), input, false, false);
      if (t == null || !orderable(o.child().dataType())) return null;
      order.add(Ir.key(t, o.isAscending(), o.nullOrdering().sql().equals("NULLS FIRST")));
    }
    if (!(spec.frameSpecification() instanceof SpecifiedWindowFrame)) return null;
    SpecifiedWindowFrame frame = (SpecifiedWindowFrame) spec.frameSpecification();
    boolean rows = frame.frameType() == RowFrame$.MODULE$;
    ObjectNode f = over.putObject("frame").put("kind", rows ? "rows" : "range");
    if (!bound(frame.lower(), rows, f, "lower") || !bound(frame.upper(), rows, f, "upper")) return null;
    Expression fn = we.windowFunction();
    if (fn instanceof RowNumber || fn instanceof Rank || fn instanceof DenseRank) {
      String win = fn instanceof RowNumber ? "row_number" : fn instanceof Rank ? "rank" : "dense_rank";
      ObjectNode call = Ir.MAPPER.createObjectNode();
      call.put("win", win).put("type", fn.dataType().catalogString()).putArray("args");
      return over(call, over, fn.dataType());
    }
    if (fn instanceof Lag || fn instanceof Lead) {
      Expression in = fn instanceof Lag ? ((Lag) fn).input() : ((Lead) fn).input();
      Expression offset = fn instanceof Lag ? ((Lag) fn).inputOffset() : ((Lead) fn).offset();
      Expression fallback = fn.children().apply(2);  // `default`, a Java keyword
      boolean ignoreNulls = fn instanceof Lag ? ((Lag) fn).ignoreNulls() : ((Lead) fn).ignoreNulls();
      Integer k = intLiteral(offset);
      if (ignoreNulls || k == null || k < 0) return null;
      ObjectNode value = expr(in, input, false, false);
      ObjectNode dflt = expr(fallback, input, false, false);
      if (value == null || dflt == null) return null;
      ObjectNode steps = Ir.MAPPER.createObjectNode();
      steps.put("type", "int").putObject("lit").put("type", "long").put("value", k);
      ObjectNode call = Ir.MAPPER.createObjectNode();
      call.put("win", fn instanceof Lag ? "lag" : "lead").put("type", fn.dataType().catalogString());
      call.putArray("args").add(value).add(steps).add(dflt);
      return over(call, over, fn.dataType());
    }
    // An aggregate over the frame: every aggregate of its translation (AVG is a sum over a
    // count) computed over the window.
    ObjectNode t = expr(fn, input, false, true);
    return t == null ? null : windowedAggregates(t, over);
  }

  private static ObjectNode over(ObjectNode fn, ObjectNode spec, DataType type) {
    ObjectNode n = spec.deepCopy();
    n.set("over", fn);
    n.put("type", type.catalogString());
    return n;
  }

  /** {@code e} with each aggregate in it computed over the window {@code spec}. */
  private static ObjectNode windowedAggregates(ObjectNode e, ObjectNode spec) {
    if (e.has("agg")) {
      if (e.path("distinct").asBoolean(false)) return null;
      return over(e, spec, DataType.fromDDL(e.get("type").asText()));
    }
    for (JsonNode arg : e.path("args")) {
      if (arg instanceof ObjectNode && windowedAggregates((ObjectNode) arg, spec) == null) return null;
    }
    ArrayNode args = e.has("args") ? (ArrayNode) e.get("args") : null;
    if (args != null) {
      for (int i = 0; i < args.size(); i++) args.set(i, windowedAggregates((ObjectNode) args.get(i), spec));
    }
    return e;
  }

  /** A frame bound into {@code f}: null (unbounded), 0 (current row) or a literal row offset. */
  private static boolean bound(Expression b, boolean rows, ObjectNode f, String key) {
    if (b instanceof UnboundedPreceding$ || b instanceof UnboundedFollowing$) {
      f.putNull(key);
      return true;
    }
    if (b instanceof CurrentRow$) {
      f.put(key, 0);
      return true;
    }
    Integer offset = rows ? intLiteral(b) : null;  // a range of values: not pushed
    if (offset == null) return false;
    f.put(key, offset);
    return true;
  }

  /**
   * An HTAP scan, inlined: its own pushed plan's scans appended to this plan's, its root with
   * their indices shifted, and a projection naming its outputs after the relation's attributes
   * (positionally: a scan's output attributes are its read schema, which its root's columns
   * are). A scan whose aggregate is partial (a task per partition) is computed whole here (the
   * plan is one task), its decimal sums in Spark's full SUM type ({@link #partialSums}).
   */
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
    ObjectNode plan = Ir.parse(pushed);
    ObjectNode root = (ObjectNode) plan.get("root");
    List<String> columns = Ir.columns(root);
    List<AttributeReference> output = CollectionConverters.asJava(r.output());
    if (columns.size() != output.size()) return null;
    int offset = scans.size();
    boolean plain = root.path("node").asText().equals("scan") && plan.get("scans").size() == 1;
    for (JsonNode scan : plan.get("scans")) scans.add(scan);
    shiftScans(root, offset);
    if ("aggregate".equals(root.path("node").asText()) && root.path("partial").asBoolean(false)) {
      root.remove("partial");
      for (JsonNode named : root.get("exprs")) {
        JsonNode e = named.get("expr");
        DataType t = e.has("agg") && "sum".equals(e.get("agg").asText()) ? DataType.fromDDL(e.get("type").asText()) : null;
        if (!(t instanceof DecimalType)) continue;
        DecimalType d = (DecimalType) t;
        ((ObjectNode) e).put("type", DataTypes.createDecimalType(Math.min(DecimalType.MAX_PRECISION(), d.precision() + 10),
            d.scale()).catalogString());
        AttributeReference a = output.get(columns.indexOf(named.get("name").asText()));
        partialSums.add(a.exprId().id());
      }
    }
    if (root.path("node").asText().equals("aggregate")) {
      for (JsonNode named : root.get("exprs")) {
        if (named.get("expr").path("op").asText().equals("/")) operators.add("AVG");  // a single table's AVG, whole
      }
    }
    n.put("node", "project").set("child", root);
    ArrayNode exprs = n.putArray("exprs");
    for (int i = 0; i < output.size(); i++) {
      AttributeReference a = output.get(i);
      exprs.add(Ir.named(name(a), Ir.col(columns.get(i), a.dataType())));
    }
    leaves.add(r);
    leafScans.add(plain ? offset : -1);
    return n;
  }

  /** Every scan node's index below {@code node} (subqueries included) shifted by {@code offset}. */
  private static void shiftScans(JsonNode node, int offset) {
    if (node instanceof ObjectNode && "scan".equals(node.path("node").asText()) && node.has("scan")) {
      ((ObjectNode) node).put("scan", node.get("scan").asInt() + offset);
    }
    for (JsonNode child : node) {
      if (child.isContainerNode()) shiftScans(child, offset);
    }
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
    if (t instanceof org.apache.spark.sql.catalyst.plans.ExistenceJoin) return "existence";
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
    ArrayNode out = Ir.MAPPER.createArrayNode();
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
    ArrayNode keys = Ir.MAPPER.createArrayNode();
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
   * Spark's V2 translation and ExprTranslator's exactness rules; aggregate functions (when allowed) and
   * uncorrelated scalar subqueries over compatible scans as placeholders filled in after.
   */
  private ObjectNode expr(Expression e, scala.collection.immutable.Seq<Attribute> input, boolean predicate, boolean aggregates) {
    int leavesBefore = leaves.size();
    int scansBefore = scans.size();
    int operatorsBefore = operators.size();
    ObjectNode out = translated(e, input, predicate, aggregates);
    if (out == null) {
      // A scalar subquery inside may have taken scans before the expression failed: nothing
      // refers to them now (the expression stays in Spark, which reads them itself), so they
      // must neither be read by the plan's query nor count as its scans.
      while (leaves.size() > leavesBefore) leaves.remove(leaves.size() - 1);
      while (leafScans.size() > leavesBefore) leafScans.remove(leafScans.size() - 1);
      while (scans.size() > scansBefore) scans.remove(scans.size() - 1);
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
            || x instanceof Like || x instanceof DecimalDivideWithOverflowCheck || x instanceof Divide || narrowing(x)
            || charPadding(x);
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
            : x instanceof Divide ? divided((Divide) x, input, aggregates)
            : x instanceof ScalarSubquery ? subquery((ScalarSubquery) x)
            : charPadding(x) ? padded((StaticInvoke) x, input) : narrowed((Cast) x, input, aggregates);
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
    ExprTranslator.Typed typed = ExprTranslator.translate(v2.get(), schema, ansi);
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

  /** Puts each slot's JSON where ExprTranslator left a column of the slot's name; false if one is lost. */
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
    ObjectNode n = Ir.MAPPER.createObjectNode();
    List<Expression> args = CollectionConverters.asJava(f.children());
    if (f instanceof Sum) {
      DataType in = ((Sum) f).child().dataType();
      boolean ok = in instanceof DecimalType || in instanceof LongType || in instanceof IntegerType || in instanceof ShortType || in instanceof ByteType
          || in instanceof DoubleType || in instanceof FloatType;
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
   * AVG as what Spark itself evaluates for it: its evaluateExpression with its sum and count
   * buffers replaced by SUM and COUNT of the same input, translated like any expression. Over
   * decimals: {@code if (count = 0) null else DecimalDivideWithOverflowCheck(sum,
   * cast(count as decimal(20,0)), decimal(p+4, s+4))} ({@link #divide}), Spark's value to the
   * last digit. Over integers and floating point: a DOUBLE sum over a DOUBLE count (legacy
   * division: NULL for no rows), the sum as SUM(CAST(x AS DOUBLE)) — for integers exactly Spark's
   * while its running sum stays below 2^53 (where Spark's own answer no longer depends on the
   * order rows arrive in); for doubles within rounding, as any pushed SUM of doubles. Decimals
   * Spark's DecimalAggregates rule already turned into a DOUBLE average (p + 4 <= 15) arrive as
   * that DOUBLE average of unscaled values, and stay in Spark.
   */
  private ObjectNode average(AggregateExpression a, Average f, scala.collection.immutable.Seq<Attribute> input) {
    DataType in = f.child().dataType();
    boolean decimal = in instanceof DecimalType;
    if (!decimal && !(in instanceof IntegralType || in instanceof FloatType || in instanceof DoubleType)) return null;
    Expression summed = decimal ? f.child() : new Cast(f.child(), DataTypes.DoubleType, scala.Option.empty());
    AggregateExpression sum = new Sum(summed).toAggregateExpression(a.isDistinct(), scala.Option.empty());
    AggregateExpression count = new Count(CollectionConverters.asScala(List.of(f.child())).toList())
        .toAggregateExpression(a.isDistinct(), scala.Option.empty());
    if (!sum.dataType().equals(f.sum().dataType()) || !count.dataType().equals(f.count().dataType())) return null;
    Expression eval = evaluated(f, sum, count);
    if (!eval.dataType().equals(f.dataType())) return null;
    return expr(eval, input, false, true);
  }

  /** Spark's own evaluation of an AVG (its evaluateExpression) with its sum and count buffers
   *  replaced by {@code sum} and {@code count}: Spark's value and type from any sum and count. */
  static Expression evaluated(Average f, Expression sum, Expression count) {
    return f.evaluateExpression().transformDown(new AbstractPartialFunction<Expression, Expression>() {
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
    operators.add("AVG");
    return Ir.call("/", result, left, right);
  }

  /**
   * Spark's `/` of doubles or decimals (it casts integers to one or the other first). DOUBLE: IEEE
   * division, the same everywhere. DECIMAL: Spark's quotient is the exact one rounded HALF_UP to
   * its result type's scale (Decimal's `/`, 39 digits truncated, then toPrecision HALF_UP),
   * rendered as integer arithmetic (htap.rewrite.render {@code divide}); only when the result
   * type holds every quotient (its integer digits p1 - s1 + s2 at least: no overflow) and the
   * arithmetic's intermediate (the divisor's digits plus the scale shift) fits 38 digits. ANSI
   * mode raises on a zero divisor ("DIV"; the targets raise too), legacy mode gives NULL ("/");
   * TRY mode (NULL on any error) stays in Spark.
   */
  private ObjectNode divided(Divide d, scala.collection.immutable.Seq<Attribute> input, boolean aggregates) {
    boolean ansi = d.evalMode() == EvalMode$.MODULE$.ANSI();
    if (!ansi && d.evalMode() != EvalMode$.MODULE$.LEGACY()) return null;
    DataType t = d.dataType();
    if (t instanceof DecimalType) {
      if (!(d.left().dataType() instanceof DecimalType) || !(d.right().dataType() instanceof DecimalType)) return null;
      DecimalType a = (DecimalType) d.left().dataType();
      DecimalType b = (DecimalType) d.right().dataType();
      DecimalType r = (DecimalType) t;
      int shift = r.scale() + b.scale() - a.scale();
      if (r.precision() - r.scale() < a.precision() - a.scale() + b.scale() || shift < 0 || b.precision() + shift > 38) {
        return null;
      }
    } else if (!(t instanceof DoubleType) || !(d.left().dataType() instanceof DoubleType)
        || !(d.right().dataType() instanceof DoubleType)) {
      return null;
    }
    ObjectNode left = expr(d.left(), input, false, aggregates);
    ObjectNode right = left == null ? null : expr(d.right(), input, false, aggregates);
    if (right == null) return null;
    return Ir.call(ansi ? "DIV" : "/", t, left, right);
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
    ObjectNode literal = Ir.MAPPER.createObjectNode();
    literal.put("type", "string").putObject("lit").put("type", "string").put("value", text);
    return Ir.call("LIKE", DataTypes.BooleanType, arg, literal);
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
    return Ir.call("cast", c.dataType(), arg);
  }

  /**
   * Spark's read-side padding of a CHAR(n) column (spark.sql.readSideCharPadding): the value
   * padded with spaces to n characters when shorter, as CHAR(n) is read in Spark.
   */
  private static boolean charPadding(Expression x) {
    if (!(x instanceof StaticInvoke)) return false;
    StaticInvoke s = (StaticInvoke) x;
    return s.functionName().equals("readSidePadding") && s.arguments().size() == 2 && intLiteral(s.arguments().apply(1)) != null
        && s.staticObject().getSimpleName().equals("CharVarcharCodegenUtils");
  }

  private ObjectNode padded(StaticInvoke s, scala.collection.immutable.Seq<Attribute> input) {
    ObjectNode value = expr(s.arguments().apply(0), input, false, false);
    if (value == null) return null;
    ObjectNode length = Ir.MAPPER.createObjectNode();
    length.put("type", "int").putObject("lit").put("type", "long").put("value", intLiteral(s.arguments().apply(1)));
    return Ir.call("CHAR_PAD", DataTypes.StringType, value, length);
  }

  /** An uncorrelated scalar subquery whose plan is itself a tree over compatible scans. */
  private ObjectNode subquery(ScalarSubquery s) {
    if (!s.outerAttrs().isEmpty() || !s.joinCond().isEmpty()) return null;
    LogicalPlan plan = s.plan();
    if (plan.output().size() != 1) return null;
    ObjectNode root = node(plan, false, false);
    if (root == null) return null;
    operators.add("scalar subquery");
    ObjectNode n = Ir.MAPPER.createObjectNode();
    n.set("subquery", root);
    n.put("type", s.dataType().catalogString());
    return n;
  }
}
