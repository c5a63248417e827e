package io.sparkhtap;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SQLExecution;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionStart;

/**
 * The driver's end of what executors must not do themselves (they never write the metadata
 * store): holding a query's leases while it runs, and marking a table whose delta a task found
 * damaged.
 *
 * <p>Installed once per SparkContext by {@link HtapCatalog}. On a SQL execution's start it hands
 * the query's HTAP scans to {@link LeaseKeeper} (renewed while it runs); on its end it releases
 * them, and if the query failed with a task's {@code HTAP_DAMAGED_REPLICA{...}} marker (see
 * htap.pushdown.datasource.DAMAGE_MARKER) it asks {@code python -m htap.catalog.bridge
 * report-damage} to check that file and mark the table unhealthy, so later queries fail over.
 * Spark delivers listener events asynchronously: the marking and the release happen just after
 * the query returns.
 */
final class HtapQueryListener extends SparkListener {
  private static final Logger LOG = Logger.getLogger(HtapQueryListener.class.getName());
  static final String DAMAGE_MARKER = "HTAP_DAMAGED_REPLICA";
  private static final Pattern DAMAGE = Pattern.compile(Pattern.quote(DAMAGE_MARKER) + "(\\{[^}]*\\})");
  private static final Map<SparkContext, Boolean> INSTALLED = Collections.synchronizedMap(new WeakHashMap<>());

  static void install(SparkContext sc) {
    if (INSTALLED.putIfAbsent(sc, Boolean.TRUE) == null) {
      sc.addSparkListener(new HtapQueryListener());
    }
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    try {
      if (event instanceof SparkListenerSQLExecutionStart) {
        long id = ((SparkListenerSQLExecutionStart) event).executionId();
        QueryExecution qe = SQLExecution.getQueryExecution(id);
        if (qe != null) {
          LeaseKeeper.INSTANCE.hold(id, scans(qe));
        }
      } else if (event instanceof SparkListenerSQLExecutionEnd) {
        SparkListenerSQLExecutionEnd end = (SparkListenerSQLExecutionEnd) event;
        List<HtapScan> scans = end.qe() == null ? List.of() : scans(end.qe());
        LeaseKeeper.INSTANCE.release(end.executionId(), scans);
        String failure = failureText(end);
        if (failure != null && failure.contains(DAMAGE_MARKER)) {
          LeaseKeeper.INSTANCE.submit(() -> reportDamage(failure, scans));
        }
      }
    } catch (Exception e) {  // never break Spark's listener bus
      LOG.log(Level.WARNING, "spark-htap: query listener failed: " + e, e);
    }
  }

  /** The HTAP scans of a query (subqueries included) that have a lease owner. */
  static List<HtapScan> scans(QueryExecution qe) {
    List<HtapScan> out = new ArrayList<>();
    try {
      HtapSnapshotStrategy.collect(qe.optimizedPlan(), out);
    } catch (Exception e) {
      // A query that failed analysis has no scans, and its error is already the query's own
      // (Spark's AnalysisException, a checked exception to javac: caught by its supertype).
      // Anything else is ours: said once, with what it was.
      if (!(e instanceof org.apache.spark.sql.AnalysisException)) {
        LOG.log(Level.WARNING, "spark-htap: cannot find the HTAP scans of a query: " + e, e);
      }
    }
    return out;
  }

  private static String failureText(SparkListenerSQLExecutionEnd end) {
    StringBuilder text = new StringBuilder();
    if (end.errorMessage().isDefined()) text.append(end.errorMessage().get()).append('\n');
    if (end.executionFailure() != null && end.executionFailure().isDefined()) {
      for (Throwable t = end.executionFailure().get(); t != null; t = t.getCause()) {
        if (t.getMessage() != null) text.append(t.getMessage()).append('\n');
        if (t.getCause() == t) break;
      }
    }
    return text.length() == 0 ? null : text.toString();
  }

  /**
   * For each distinct damaged delta the failure names, ask each catalog of the query's scans to
   * check it (the bridge marks the table only if the file is a live delta of a table of that
   * catalog's source and is damaged).
   */
  private static void reportDamage(String failure, List<HtapScan> scans) {
    Set<List<String>> reports = new LinkedHashSet<>();
    Matcher m = DAMAGE.matcher(failure);
    while (m.find()) {
      try {
        JsonNode facts = Ir.MAPPER.readTree(m.group(1));
        if (facts.hasNonNull("table_id") && facts.hasNonNull("delta")) {
          reports.add(List.of(facts.get("table_id").asText(), facts.get("delta").asText()));
        }
      } catch (java.io.IOException e) {
        LOG.warning("spark-htap: unreadable damage report " + m.group(1));
      }
    }
    Map<List<String>, Map<String, String>> catalogs = new LinkedHashMap<>();
    for (HtapScan s : scans) {
      Map<String, String> o = s.catalogOptions();
      catalogs.putIfAbsent(List.of(o.getOrDefault("config", ""), o.getOrDefault("source", "")), o);
    }
    for (List<String> report : reports) {
      for (Map<String, String> options : catalogs.values()) {
        try {
          JsonNode answer = Bridge.call(options, "report-damage", report.get(0), report.get(1));
          LOG.info("spark-htap: damage report " + report + ": " + answer);
        } catch (RuntimeException e) {
          LOG.log(Level.WARNING, "spark-htap: cannot report damaged delta " + report.get(1) + ": " + e.getMessage());
        }
      }
    }
  }
}
