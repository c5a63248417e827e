package io.sparkhtap;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2ScanRelation;

import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;

/**
 * Puts every HTAP scan of one query on one snapshot.
 *
 * <p>A planner strategy that plans nothing itself: the planner calls it first with the whole
 * optimized query (scans pushed down, subqueries included), and it gives every HTAP scan that
 * has no snapshot yet one token and the list of the query's HTAP tables. The Python readers
 * resolve the token, once, to the minimum of those tables' max safe seqs (per source), and all
 * scans read at it. (Spark's pre-CBO optimizer rules run before V2 scan push-down, so a rule
 * could not see the scans.)
 */
public class HtapSnapshotStrategy extends SparkStrategy {
  @Override
  public Seq<SparkPlan> apply(LogicalPlan plan) {
    List<HtapScan> scans = new ArrayList<>();
    collect(plan, scans);
    scans.removeIf(HtapScan::hasSnapshot);
    if (!scans.isEmpty()) {
      Set<String> tables = new LinkedHashSet<>();
      for (HtapScan s : scans) {
        tables.addAll(s.tableNames());
      }
      String token = UUID.randomUUID().toString();
      String names = String.join(",", tables);
      for (HtapScan s : scans) {
        s.setSnapshot(token, names);
      }
    }
    return List$.MODULE$.empty();
  }

  /** Whether the plan (or a subquery of it) reads an HTAP table. */
  static boolean hasHtapScan(LogicalPlan p) {
    List<HtapScan> scans = new ArrayList<>();
    collect(p, scans);
    return !scans.isEmpty();
  }

  /**
   * HTAP scans in the plan, its children and the plans of its subquery expressions; with each,
   * the scan that replaced its subtree (HtapSubtreeStrategy), once.
   */
  static void collect(LogicalPlan p, List<HtapScan> out) {
    if (p instanceof DataSourceV2ScanRelation && ((DataSourceV2ScanRelation) p).scan() instanceof HtapScan) {
      HtapScan scan = (HtapScan) ((DataSourceV2ScanRelation) p).scan();
      out.add(scan);
      HtapScan absorber = scan.absorbedBy();
      if (absorber != null && out.stream().noneMatch(s -> s == absorber)) out.add(absorber);
    }
    scala.collection.Iterator<LogicalPlan> it = p.children().iterator();
    while (it.hasNext()) {
      collect(it.next(), out);
    }
    scala.collection.Iterator<LogicalPlan> sub = p.subqueries().iterator();
    while (sub.hasNext()) {
      collect(sub.next(), out);
    }
  }
}
