package io.sparkhtap;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Level;
import java.util.logging.Logger;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;

import org.apache.spark.SparkEnv;
import org.apache.spark.metrics.source.Source;

/**
 * Where pushdown gave up because something went wrong while translating, rendering or planning
 * a pushed part of a query: the query then runs with less pushed (Spark keeps that part), never
 * fails because of us. Each such fallback is logged once per (query fingerprint, where, error),
 * with the node that failed, and counted: {@link #count()} here, and the Spark metric
 * {@code <app>.driver.htap.pushdownFallbacks} (Spark's metrics system: JMX, the Prometheus
 * servlet, ...), registered with the first fallback.
 *
 * <p>A fallback is a bug of ours (a shape the translator believed it knew): the log line has what
 * a report needs. Fatal JVM errors (out of memory, ...) are not caught anywhere.
 */
public final class Fallbacks {
  private static final Logger LOG = Logger.getLogger(Fallbacks.class.getName());
  private static final AtomicLong TOTAL = new AtomicLong();
  private static final Map<String, AtomicLong> BY_WHERE = new ConcurrentHashMap<>();
  /** What was logged already (bounded: a long-running driver does not grow without end). */
  private static final Set<String> LOGGED = Collections.newSetFromMap(new LinkedHashMap<String, Boolean>() {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
      return size() > 10_000;
    }
  });
  private static volatile boolean registered;

  private Fallbacks() {}

  /**
   * A wrong spark-htap setting of the session (a conf with a value it does not take): the user's
   * to fix, so it fails the query with a message naming the right values, never a fallback.
   */
  static final class BadSetting extends IllegalArgumentException {
    BadSetting(String message) {
      super(message);
    }
  }

  /**
   * Whether {@code t} may be caught and turned into "not pushed": not a fatal JVM error, and not
   * a {@link BadSetting} (which the user must see).
   */
  static boolean recoverable(Throwable t) {
    return !(t instanceof VirtualMachineError || t instanceof ThreadDeath || t instanceof LinkageError
        || t instanceof BadSetting);
  }

  /**
   * Records a fallback: {@code where} (e.g. "whole-subtree translation", "aggregate pushdown"),
   * {@code fingerprint} (a stable hash of the query or the table), {@code node} (what failed, as
   * text) and the error. Rethrows fatal errors.
   */
  static void record(String where, String fingerprint, Object node, Throwable error) {
    if (!recoverable(error)) throw Fallbacks.<RuntimeException>sneaky(error);
    TOTAL.incrementAndGet();
    BY_WHERE.computeIfAbsent(where, k -> new AtomicLong()).incrementAndGet();
    register();
    String key = where + "|" + fingerprint + "|" + error.getClass().getName() + "|" + error.getMessage();
    boolean first;
    synchronized (LOGGED) {
      first = LOGGED.add(key);
    }
    if (first) {
      String text = String.valueOf(node);
      if (text.length() > 2000) text = text.substring(0, 2000) + " ...";
      LOG.log(Level.WARNING, "spark-htap: " + where + " failed for query " + fingerprint
          + "; that part of the query stays in Spark (the answer is unchanged, less is pushed). This is a spark-htap bug:"
          + " please report it with this message. Node: " + text, error);
    }
  }

  /** Fallbacks recorded by this JVM since it started. */
  public static long count() {
    return TOTAL.get();
  }

  /** Fallbacks recorded by this JVM, by where they happened. */
  public static Map<String, Long> counts() {
    Map<String, Long> out = new LinkedHashMap<>();
    BY_WHERE.forEach((k, v) -> out.put(k, v.get()));
    return out;
  }

  /** The driver's metric source, registered once (when Spark's environment is up). */
  private static void register() {
    if (registered) return;
    synchronized (Fallbacks.class) {
      if (registered) return;
      try {
        SparkEnv env = SparkEnv.get();
        if (env == null) return;
        MetricRegistry metrics = new MetricRegistry();
        metrics.register("pushdownFallbacks", (Gauge<Long>) Fallbacks::count);
        env.metricsSystem().registerSource(new Source() {
          @Override
          public String sourceName() {
            return "htap";
          }

          @Override
          public MetricRegistry metricRegistry() {
            return metrics;
          }
        });
        registered = true;
      } catch (RuntimeException e) {
        LOG.log(Level.FINE, "spark-htap: could not register the pushdown fallback metric", e);
        registered = true;  // counted and logged all the same; not tried on every fallback
      }
    }
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> E sneaky(Throwable e) throws E {
    throw (E) e;
  }
}
