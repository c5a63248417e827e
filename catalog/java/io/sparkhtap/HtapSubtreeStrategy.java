package io.sparkhtap;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ReturnAnswer;
import org.apache.spark.sql.catalyst.plans.logical.Sort;
import org.apache.spark.sql.catalyst.plans.physical.SinglePartition$;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.execution.SortExec;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.FilterExec;
import org.apache.spark.sql.execution.ProjectExec;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;

import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Whole-subtree pushdown: where DSv2 cannot carry a query (semi and anti joins from EXISTS / IN /
 * NOT IN, aggregates between joins, scalar subqueries, filters above joins), the largest subtree
 * of the optimized plan whose operators {@link PlanTranslator} translates exactly and whose leaves
 * are HTAP scans of one catalog, source, option set and snapshot becomes ONE scan: one query
 * (DuckDB over the replica, or the source's SQL on failover) at the query's one snapshot.
 *
 * <p>A planner strategy: the planner offers it the whole query first, then (for what another
 * strategy planned) each child, so the first subtree it takes is the largest. It runs after
 * {@link HtapSnapshotStrategy}, so the leaves already share the query's snapshot token, which
 * the new scan takes over. Its leaves are counted with those of the uncorrelated scalar
 * subqueries it carries (TPC-H Q11: one DSv2-joined scan, and another in its HAVING's subquery);
 * a subtree of one scan is left alone (DSv2 already pushes into it, in parallel) unless that scan
 * is one task anyway and the tree sorts, aggregates or windows it ({@link #oneLeafPays}); the whole
 * tree runs as one task, unless {@link SplitSubtree} splits its aggregate or top-N by the
 * partitions of its largest table (when the cluster's task slots pay for it). On by default; {@code
 * spark.htap.wholeQueryPushdown=false} turns it off (each scan is then planned on its own, joins
 * pushed through DSv2 where Spark offers them).
 */
public class HtapSubtreeStrategy extends SparkStrategy {
  static final String CONF = "spark.htap.wholeQueryPushdown";

  /** The scan built for a subtree, kept so that planning the same plan again (EXPLAIN, AQE) reuses it. */
  private static final Map<LogicalPlan, Absorbed> BUILT = Collections.synchronizedMap(new WeakHashMap<>());

  /** The one scan of a subtree, and what Spark still filters above it (or null). */
  static final class Absorbed {
    final DataSourceV2ScanRelation scan;
    final Expression residual;

    Absorbed(DataSourceV2ScanRelation scan, Expression residual) {
      this.scan = scan;
      this.residual = residual;
    }
  }

  @Override
  public Seq<SparkPlan> apply(LogicalPlan plan) {
    String on = SQLConf.get().getConfString(CONF, "true").trim();
    if (!on.equalsIgnoreCase("true") && !on.equalsIgnoreCase("false")) {
      throw new Fallbacks.BadSetting(CONF + " must be true or false, not '" + on
          + "' (true: a subtree over HTAP tables of one source runs as one scan; false: each scan is planned on its own)");
    }
    if (on.equalsIgnoreCase("false")) return List$.MODULE$.empty();
    try {
      return planned(plan);
    } catch (Throwable t) {
      Fallbacks.record("whole-subtree planning", Integer.toHexString(plan.semanticHash()), plan, t);
      return List$.MODULE$.empty();
    }
  }

  private Seq<SparkPlan> planned(LogicalPlan plan) {
    LogicalPlan target = plan instanceof ReturnAnswer ? ((ReturnAnswer) plan).child() : plan;
    if (target instanceof DataSourceV2ScanRelation || target.children().isEmpty()) return List$.MODULE$.empty();
    if (SplitSubtree.built(target)) return List$.MODULE$.empty();  // Spark merges what the split scan's tasks return
    LogicalPlan splittable = SplitSubtree.below(target);
    if (splittable != null && SplitSubtree.decide(splittable).plan != null) {
      // The aggregate or top-N runs split by partitions and Spark merges it; what is above it
      // stays in Spark, planned as usual (its children, the split node among them, are offered again).
      if (splittable != target) return List$.MODULE$.empty();
      return CollectionConverters.asScala(List.<SparkPlan>of(planLater(SplitSubtree.decide(splittable).plan))).toList();
    }
    Absorbed done = built(target);
    if (done == null) {
      SparkPlan sorted = target instanceof Sort ? sortOfOneTask((Sort) target) : null;
      if (sorted == null) sorted = oneOperatorAboveSubqueries(target);
      return sorted == null ? List$.MODULE$.empty() : CollectionConverters.asScala(List.<SparkPlan>of(sorted)).toList();
    }
    SparkPlan scan = planLater(done.scan);
    SparkPlan top = done.residual == null ? scan : new FilterExec(done.residual, scan);
    return CollectionConverters.asScala(List.<SparkPlan>of(top)).toList();
  }

  /**
   * The one scan for {@code plan}'s subtree (built once per plan), or null. Total: an error while
   * translating the subtree is a fallback (logged once, counted; {@link Fallbacks}) and leaves
   * the subtree to Spark, whose children are then offered again.
   */
  private static Absorbed built(LogicalPlan plan) {
    Absorbed done = BUILT.get(plan);
    if (done == null) {
      try {
        done = absorb(plan);
      } catch (Throwable t) {
        Fallbacks.record("whole-subtree pushdown", Integer.toHexString(plan.semanticHash()), plan, t);
        return null;
      }
      if (done != null) BUILT.put(plan, done);
    }
    return done;
  }

  /**
   * A global ORDER BY that stays in Spark (its projection holds what the tree cannot carry: TPC-H
   * Q8's decimal division) over projections and filters of a scan that is ONE task anyway (a
   * whole subtree, or a scan whose aggregate is complete): the rows go to one partition and are
   * sorted there. Spark would otherwise range-partition them, and the range exchange's sampling
   * job runs the scan's whole query once more before the shuffle runs it again (Q8 read
   * everything twice). The rows are few (a complete aggregate) or come from one task already, so
   * one sorting task loses no parallelism. Null when the tree below is not such a scan.
   */
  private SparkPlan sortOfOneTask(Sort sort) {
    if (!sort.global()) return null;
    LogicalPlan below = sort.child();
    while (below instanceof Project || below instanceof Filter) below = below.children().head();
    boolean oneTask = below instanceof DataSourceV2ScanRelation && ((DataSourceV2ScanRelation) below).scan() instanceof HtapScan
        ? complete((HtapScan) ((DataSourceV2ScanRelation) below).scan())
        : !below.children().isEmpty() && HtapSnapshotStrategy.hasHtapScan(below) && built(below) != null;
    if (!oneTask) return null;
    SparkPlan single = new ShuffleExchangeExec(SinglePartition$.MODULE$, planLater(sort.child()),
        ShuffleExchangeExec.$lessinit$greater$default$3(), ShuffleExchangeExec.$lessinit$greater$default$4(),
        ShuffleExchangeExec.$lessinit$greater$default$5());
    return new SortExec(sort.order(), true, single, 0);
  }

  /**
   * A projection or filter this strategy does not take, above a chain of projections and filters
   * over a scan where one of them holds a subquery: planned alone (as Spark's BasicOperators
   * would), its child offered again. Spark's DataSourceV2Strategy would otherwise plan the whole
   * chain in one step, subquery included, and the tree of the subquery's own operator — which
   * this strategy may take, subquery and all — would never be offered. That matters under AQE:
   * subqueries are planned once, from the first physical plan, and the plan above a finished
   * stage is planned again (an empty side of a join removed, say, which puts new projections
   * and filters above the chain); a subquery the first plan left inside a scan and a re-plan
   * leaves to Spark has no plan ("key not found" in PlanAdaptiveSubqueries: fuzz seed 21
   * query 123). Null for anything else (Spark plans it as usual).
   */
  private SparkPlan oneOperatorAboveSubqueries(LogicalPlan plan) {
    if (!(plan instanceof Project || plan instanceof Filter)) return null;
    boolean below = false;
    for (LogicalPlan p = plan.children().head(); p instanceof Project || p instanceof Filter; p = p.children().head()) {
      if (p.expressions().exists(SubqueryExpression::hasSubquery)) below = true;
    }
    if (!below || !HtapSnapshotStrategy.hasHtapScan(plan)) return null;
    return plan instanceof Project
        ? new ProjectExec(((Project) plan).projectList(), planLater(((Project) plan).child()))
        : new FilterExec(((Filter) plan).condition(), planLater(((Filter) plan).child()));
  }

  /** Whether a scan's pushed aggregate is complete (the scan is then one task). */
  static boolean complete(HtapScan scan) {
    String pushed = scan.catalogOptions().get("pushed");
    if (pushed == null) return false;
    ObjectNode plan = Ir.parse(pushed);
    if (plan.has("split")) return false;
    JsonNode node = plan.get("root");
    while (node.path("node").asText().equals("limit") || node.path("node").asText().equals("project")) node = node.get("child");
    return node.path("node").asText().equals("aggregate") && !node.path("partial").asBoolean(false);
  }

  /**
   * Whether a tree over ONE scan (its scalar subqueries read none) is worth taking: only when
   * that scan is already one task, or the cluster has no more task slots than one task's cores
   * (so no parallelism is lost), and the tree does work Spark would need an exchange for. Measured: a global ORDER BY over a complete aggregate (TPC-H Q5, Q7,
   * Q9, Q12) is, in Spark, a range-partitioning exchange whose sampling job runs the scan's whole
   * query once more before the shuffle runs it again; in the tree it is part of the one query.
   * Likewise an aggregate, a window, a top-N or an offset above a one-task scan (a DSv2-joined
   * one, say): a shuffle in Spark, one query here, and fewer rows handed over. Other work above
   * one scan (a projection, a HAVING filter, an AVG's division) costs Spark little and stays
   * there; a scan read in several tasks stays with Spark, which merges or reads it in parallel.
   */
  static boolean oneLeafPays(PlanTranslator t) {
    HtapScan scan = (HtapScan) t.leaves.get(0).scan();
    if (Ir.parse(scan.catalogOptions().get("pushed")).has("split")) {
      // Split by partitions: taken only where one task loses nothing (no more task slots than
      // one task's cores: local mode), and never against a split the session asked for.
      int[] cores = JoinedTables.cores();
      SQLConf conf = SQLConf.get();
      boolean asked = conf.getConfString(JoinedTables.TABLE_SPLIT_CONF, "auto").trim().equalsIgnoreCase("true")
          || conf.getConfString(JoinedTables.SPLIT_CONF, "auto").trim().equalsIgnoreCase("true");
      if (cores[0] > cores[1] || asked) return false;
    }
    for (String op : List.of("Sort", "Aggregate", "Window", "TopN", "Offset", "Expand")) {
      if (t.operators.contains(op)) return true;
    }
    return false;
  }

  /**
   * One scan for the whole of {@code plan}, or null. Filter conjuncts the tree cannot carry
   * (a scalar subquery taking AVG, say) whose rows and columns reach the top unchanged are left
   * to Spark, above the scan, instead of leaving the whole subtree (its joins) to Spark.
   */
  static Absorbed absorb(LogicalPlan plan) {
    if (!HtapSnapshotStrategy.hasHtapScan(plan)) return null;
    PlanTranslator t = new PlanTranslator();
    ObjectNode json = t.translate(plan);
    if (json == null || t.leaves.isEmpty()) return null;
    if (t.leaves.size() == 1 && !oneLeafPays(t)) return null;
    List<AttributeReference> output = new ArrayList<>();
    StructType schema = new StructType();
    for (Attribute a : CollectionConverters.asJava(plan.output())) {
      if (!(a instanceof AttributeReference)) return null;
      output.add((AttributeReference) a);
      schema = schema.add(PlanTranslator.name(a), a.dataType(), true);
    }
    String pushed = Ir.text(json);
    String why = PlanCheck.why(((HtapScan) t.leaves.get(0).scan()).catalogOptions(), pushed);
    if (why != null) {
      Fallbacks.record("whole-subtree pushdown (plan check)", Integer.toHexString(plan.semanticHash()), pushed,
          new IllegalStateException(why));
      return null;
    }
    String how = "whole subtree pushed: " + String.join(", ", new LinkedHashSet<>(t.operators)) + " over " + t.leaves.size()
        + " scans" + (t.leaves.size() != 1 ? "" : complete((HtapScan) t.leaves.get(0).scan())
            ? " (its aggregate complete in the scan)" : " (one task loses no parallelism)")
        + (t.residuals.isEmpty() ? "" : "; Spark filters above it: " + t.residuals) + "; one task: the subtree is one query (DuckDB over the replica, or one source statement) at the"
        + " query's one snapshot" + SplitSubtree.whyNot(plan);
    Expression residual = null;
    for (Expression r : t.residuals) residual = residual == null ? r : new And(residual, r);
    return new Absorbed(scanOf(t, pushed, output, schema, how), residual);
  }

  /**
   * The one scan that reads a translated subtree's pushed plan in place of its leaves, at their
   * snapshot; {@code how} (what was pushed and how it runs) goes into EXPLAIN's description.
   */
  static DataSourceV2ScanRelation scanOf(PlanTranslator t, String pushed, List<AttributeReference> output, StructType schema,
                                         String how) {
    HtapScan first = (HtapScan) t.leaves.get(0).scan();
    Map<String, String> options = new HashMap<>(first.catalogOptions());
    options.put("pushed", pushed);
    Set<String> tables = new LinkedHashSet<>();
    long bytes = 0;
    for (DataSourceV2ScanRelation r : t.leaves) {
      HtapScan s = (HtapScan) r.scan();
      tables.addAll(s.tableNames());
      Statistics st = s.estimateStatistics();
      bytes = bytes < 0 || !st.sizeInBytes().isPresent() ? -1 : bytes + st.sizeInBytes().getAsLong();
    }
    String description = "HtapScan " + String.join(", ", tables) + " [" + how + "] pushed=" + pushed;
    HtapScan scan = new HtapScan(new ArrayList<>(tables), schema, options, description,
        bytes < 0 ? null : new long[] {-1, Math.max(bytes, 1)}, false, null);
    if (first.snapshotToken() != null) scan.setSnapshot(first.snapshotToken(), first.snapshotTables());
    for (DataSourceV2ScanRelation r : t.leaves) ((HtapScan) r.scan()).absorbedBy(scan);
    return new DataSourceV2ScanRelation(t.leaves.get(0).relation(), scan,
        CollectionConverters.asScala(output).toList(), DataSourceV2ScanRelation.$lessinit$greater$default$4(),
        DataSourceV2ScanRelation.$lessinit$greater$default$5(), DataSourceV2ScanRelation.$lessinit$greater$default$6(),
        DataSourceV2ScanRelation.$lessinit$greater$default$7());
  }
}
