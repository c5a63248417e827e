package io.sparkhtap;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The driver holds the leases of running queries (executors never write the metadata store).
 *
 * <p>A scan's planning (Python, on the driver) takes its leases under the scan's lease owner
 * ({@link HtapScan#leaseOwner()}). While a query runs ({@link HtapQueryListener}: from its SQL
 * execution's start to its end) this keeper renews its scans' leases every {@code pin_ttl_s / 4}
 * and, when it ends, releases them, both through {@code python -m htap.catalog.bridge}, batched
 * per catalog. If the driver dies, the leases expire {@code pin_ttl_s} after their last renewal.
 * One daemon thread does all of it, so the listener bus never waits for a Python process.
 */
final class LeaseKeeper {
  private static final Logger LOG = Logger.getLogger(LeaseKeeper.class.getName());
  static final LeaseKeeper INSTANCE = new LeaseKeeper();
  /** How often the keeper looks for leases due for renewal (no Python process unless some are). */
  private static final double TICK_S = 0.5;

  /** Scans of running queries: lease owner -> the scan's catalog options. */
  private final Map<String, Map<String, String>> held = new ConcurrentHashMap<>();
  /** The owners each running SQL execution holds. */
  private final Map<Long, List<String>> byExecution = new ConcurrentHashMap<>();
  /** Owners already released: a late start event must not hold them again (bounded). */
  private final Set<String> released = Collections.newSetFromMap(new LinkedHashMap<String, Boolean>() {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
      return size() > 100_000;
    }
  });
  /** pin_ttl_s per config file, from the renewals' answers. */
  private final Map<String, Double> ttl = new ConcurrentHashMap<>();
  /** When each config's leases were last renewed (System.nanoTime). */
  private final Map<String, Long> lastRenewal = new ConcurrentHashMap<>();
  private final ScheduledExecutorService worker;

  private LeaseKeeper() {
    ScheduledThreadPoolExecutor pool = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "spark-htap-leases");
      t.setDaemon(true);
      return t;
    });
    this.worker = pool;
    worker.schedule(this::renewRound, (long) (TICK_S * 1000), TimeUnit.MILLISECONDS);
  }

  /** A query's SQL execution started: hold the leases of its HTAP scans until it ends. */
  void hold(long executionId, List<HtapScan> scans) {
    List<String> owners = new ArrayList<>();
    synchronized (released) {
      for (HtapScan s : scans) {
        if (!released.contains(s.leaseOwner())) {
          held.put(s.leaseOwner(), s.catalogOptions());
          owners.add(s.leaseOwner());
        }
      }
    }
    if (!owners.isEmpty()) {
      byExecution.merge(executionId, owners, (a, b) -> {
        List<String> all = new ArrayList<>(a);
        all.addAll(b);
        return all;
      });
    }
  }

  /** A query's SQL execution ended: release what it held and the leases of `scans` (planned ones). */
  void release(long executionId, List<HtapScan> scans) {
    Map<String, Map<String, String>> owners = new HashMap<>();
    List<String> ofExecution = byExecution.remove(executionId);
    synchronized (released) {
      if (ofExecution != null) {
        for (String o : ofExecution) {
          Map<String, String> options = held.remove(o);
          if (options != null && released.add(o)) owners.put(o, options);
        }
      }
      for (HtapScan s : scans) {
        held.remove(s.leaseOwner());
        if (s.planned() && released.add(s.leaseOwner())) owners.put(s.leaseOwner(), s.catalogOptions());
      }
    }
    if (!owners.isEmpty()) {
      worker.execute(() -> call("release-leases", owners));
    }
  }

  /** Run `task` on the keeper's thread (a bridge call the listener bus must not wait for). */
  void submit(Runnable task) {
    worker.execute(task);
  }

  /**
   * Every TICK_S: renew the held leases of each store whose last renewal is a quarter of its
   * TTL old (a store whose TTL is not known yet at once). Nothing runs while nothing is held.
   */
  private void renewRound() {
    try {
      Map<String, Map<String, String>> due = new HashMap<>();
      long now = System.nanoTime();
      for (Map.Entry<String, Map<String, String>> e : held.entrySet()) {
        String config = e.getValue().getOrDefault("config", "");
        Double t = ttl.get(config);
        Long last = lastRenewal.get(config);
        if (t == null || last == null || (now - last) / 1e9 >= t / 4) due.put(e.getKey(), e.getValue());
      }
      if (!due.isEmpty()) {
        for (Map<String, String> options : due.values()) lastRenewal.put(options.getOrDefault("config", ""), now);
        call("renew-leases", due);
      }
    } catch (RuntimeException e) {
      LOG.log(Level.WARNING, "spark-htap: renewing the leases of running queries failed: " + e.getMessage(), e);
    } finally {
      worker.schedule(this::renewRound, (long) (TICK_S * 1000), TimeUnit.MILLISECONDS);
    }
  }

  /** One bridge call per catalog (config + source) for these owners. */
  private void call(String command, Map<String, Map<String, String>> owners) {
    Map<List<String>, List<String>> groups = new HashMap<>();
    Map<List<String>, Map<String, String>> optionsOf = new HashMap<>();
    for (Map.Entry<String, Map<String, String>> e : owners.entrySet()) {
      Map<String, String> o = e.getValue();
      List<String> key = List.of(o.getOrDefault("config", ""), o.getOrDefault("source", ""));
      groups.computeIfAbsent(key, k -> new ArrayList<>()).add(e.getKey());
      optionsOf.put(key, o);
    }
    for (Map.Entry<List<String>, List<String>> g : groups.entrySet()) {
      List<String> args = new ArrayList<>();
      args.add(command);
      args.addAll(g.getValue());
      try {
        JsonNode answer = Bridge.call(optionsOf.get(g.getKey()), args.toArray(new String[0]));
        if (answer.has("ttl_s")) {
          ttl.put(g.getKey().get(0), answer.get("ttl_s").asDouble());
        }
      } catch (RuntimeException e) {
        LOG.log(Level.WARNING, "spark-htap: " + command + " failed for " + g.getKey().get(0) + ": " + e.getMessage());
      }
    }
  }
}
