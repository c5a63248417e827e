package io.sparkhtap;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Catalog calls answered by Python ({@code htap.catalog.bridge}): listing tables, failover
 * toggles, the driver's lease renewals and releases, damage reports. The metadata store has one
 * implementation, in Python; the shim stays glue.
 *
 * <p>One long-lived Python process per driver (per Python executable) answers them: {@code
 * python -m htap.catalog.bridge --serve}, one JSON line per call each way. A process per call
 * cost ~0.7 s of CPU (interpreter and imports) and ran after every query (lease release). The
 * process starts on the first call, is started again when it died (a call it was answering is
 * retried once: every bridge call is idempotent), is killed when a call outlives
 * {@value #TIMEOUT_CONF} (default {@value #DEFAULT_TIMEOUT_SECONDS} s), and ends with the JVM
 * (a shutdown hook, and its stdin closing). Calls are serialized.
 */
final class Bridge {
  private Bridge() {}

  /** The last Python resolved from a session's conf: listener threads have no active session. */
  private static volatile String lastPython;

  static String python() {
    SparkConf conf = null;
    try {
      conf = SparkSession.active().sparkContext().getConf();
    } catch (IllegalStateException e) {
      if (lastPython != null) return lastPython;
    }
    for (String key : new String[] {"spark.pyspark.driver.python", "spark.pyspark.python"}) {
      if (conf != null && conf.contains(key)) return lastPython = conf.get(key);
    }
    for (String env : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String v = System.getenv(env);
      if (v != null && !v.isEmpty()) return v;
    }
    return "python3";
  }

  /**
   * Whether the bridge runs the Python that executors run (spark.pyspark.python /
   * PYSPARK_PYTHON, when set): a read function pickled by value in one Python version need not
   * unpickle in another, so reads are planned in the bridge only then.
   */
  static boolean runsExecutorsPython() {
    String executors = null;
    try {
      SparkConf conf = SparkSession.active().sparkContext().getConf();
      if (conf.contains("spark.pyspark.python")) executors = conf.get("spark.pyspark.python");
    } catch (IllegalStateException e) {
      // no active session: the environment decides
    }
    if (executors == null) executors = System.getenv("PYSPARK_PYTHON");
    return executors == null || executors.isEmpty() || executors.equals(python());
  }

  /** Exit codes of htap.catalog.bridge (keep in sync with catalog/bridge.py). */
  static final int EXIT_ERROR = 2;
  static final int EXIT_NO_SUCH_TABLE = 3;
  static final int EXIT_PERMISSION_DENIED = 4;
  /** A catalog call reads or writes a few metadata rows; anything this slow is stuck. */
  static final long DEFAULT_TIMEOUT_SECONDS = 120;
  static final String TIMEOUT_CONF = "spark.htap.bridge.timeoutSeconds";
  private static volatile double lastTimeout = DEFAULT_TIMEOUT_SECONDS;

  /** The session's {@value #TIMEOUT_CONF} (runtime-settable), else the last one seen. */
  static double timeoutSeconds() {
    try {
      scala.Option<SparkSession> s = SparkSession.getActiveSession();
      if (s.isEmpty()) s = SparkSession.getDefaultSession();
      if (s.isDefined()) {
        lastTimeout = Double.parseDouble(s.get().conf().get(TIMEOUT_CONF, Long.toString(DEFAULT_TIMEOUT_SECONDS)));
      }
    } catch (RuntimeException e) {
      // no session (JVM shutting down) or an unreadable value: keep the last one
    }
    return lastTimeout;
  }

  private static final Map<String, Daemon> DAEMONS = new ConcurrentHashMap<>();

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(() -> DAEMONS.values().forEach(Daemon::stop), "spark-htap-bridge-stop"));
  }

  /** Run a bridge command and return its JSON answer; its one-line error becomes the exception. */
  static JsonNode call(Map<String, String> options, String... args) {
    List<String> argv = new ArrayList<>(List.of("--config", options.get("config")));
    if (options.containsKey("source")) {
      argv.add("--source");
      argv.add(options.get("source"));
    }
    argv.addAll(List.of(args));
    JsonNode answer = DAEMONS.computeIfAbsent(python(), Daemon::new).call(argv, timeoutSeconds());
    int code = answer.path("code").asInt(-1);
    String message = answer.path("err").asText("").strip();
    if (code == EXIT_NO_SUCH_TABLE) {
      throw new NoSuchTable(message);
    }
    if (code == EXIT_ERROR) {
      throw new IllegalArgumentException(message);
    }
    if (code != 0) {
      throw new IllegalStateException("spark-htap catalog call failed (exit " + code + "): " + argv + "\n" + message);
    }
    try {
      return Ir.MAPPER.readTree(answer.path("out").asText(""));
    } catch (IOException e) {
      throw new IllegalStateException("spark-htap catalog call " + argv + " answered no JSON: " + answer, e);
    }
  }

  /**
   * A scan's read planned by the bridge process (htap.pushdown.read_planning), as Spark's
   * planning worker would answer it; null when the process stays busy with another call for
   * {@value #PLAN_WAIT_S} s (another query's planning with its source round trips): the caller
   * then plans in Spark's worker, so concurrent queries do not queue behind one another here.
   * (The calls that end every query, lease releases, take milliseconds: worth waiting for.) The reader's errors come back as their own
   * lines (the markers HtapBatch.translate looks for); the options, a password among them, never
   * appear in an exception.
   */
  static final double PLAN_WAIT_S = 5;

  static PythonDataSourceReadInfo planRead(Map<String, String> options, StructType schema, int maxArrowBatchSize,
                                           boolean binaryAsBytes) {
    List<String> argv = new ArrayList<>(List.of("--config", options.get("config"), "plan-read"));
    try {
      argv.add(Ir.MAPPER.writeValueAsString(new java.util.TreeMap<>(options)));
    } catch (IOException e) {
      throw new IllegalStateException("cannot write a scan's options as JSON: " + e, e);
    }
    argv.addAll(List.of(schema.json(), Integer.toString(maxArrowBatchSize), Boolean.toString(binaryAsBytes)));
    String table = options.get("table");
    JsonNode answer = DAEMONS.computeIfAbsent(python(), Daemon::new).call(argv, timeoutSeconds(), PLAN_WAIT_S,
        "plan-read of " + table);
    if (answer == null) return null;
    int code = answer.path("code").asInt(-1);
    if (code != 0) {
      // The exit code types the error (htap.catalog.bridge.plan_read); only a bug is "could not plan".
      String message = answer.path("err").asText("").strip();
      if (code == EXIT_PERMISSION_DENIED) throw new SecurityException(message);
      if (code == EXIT_ERROR || code == EXIT_NO_SUCH_TABLE) throw new IllegalArgumentException(message);
      throw new IllegalStateException("spark-htap could not plan the read of " + table + " (exit " + code + "): " + message);
    }
    try {
      JsonNode planned = Ir.MAPPER.readTree(answer.path("out").asText(""));
      Base64.Decoder b64 = Base64.getDecoder();
      List<byte[]> partitions = new ArrayList<>();
      for (JsonNode p : planned.path("partitions")) partitions.add(b64.decode(p.asText()));
      return new PythonDataSourceReadInfo(b64.decode(planned.path("func").asText()),
          CollectionConverters.asScala(partitions).toSeq());
    } catch (IOException | IllegalArgumentException e) {
      throw new IllegalStateException("the spark-htap bridge answered no read plan for " + table + ": " + e, e);
    }
  }

  /** The pid of the bridge process serving this JVM (-1 when none runs): for tests and operators. */
  static long pid() {
    Daemon d = DAEMONS.get(python());
    return d == null ? -1 : d.pid();
  }

  /** One {@code python -m htap.catalog.bridge --serve} process, started (again) on demand. */
  static final class Daemon {
    private static final Object EOF = new Object();
    private final String python;
    private final ReentrantLock lock = new ReentrantLock();
    private Process process;
    private Writer requests;
    private BlockingQueue<Object> answers;
    private final Deque<String> stderrTail = new ArrayDeque<>();

    Daemon(String python) {
      this.python = python;
    }

    synchronized long pid() {
      return process != null && process.isAlive() ? process.pid() : -1;
    }

    JsonNode call(List<String> argv, double timeoutS) {
      return call(argv, timeoutS, -1, argv.toString());
    }

    /**
     * The answer to {@code argv}; null when {@code waitS} >= 0 and the process stayed busy with
     * another call that long. {@code label} names the call in errors (never a password-bearing argv).
     */
    JsonNode call(List<String> argv, double timeoutS, double waitS, String label) {
      long timeoutNanos = (long) (timeoutS * 1e9);
      long deadline = System.nanoTime() + timeoutNanos;
      try {
        if (waitS >= 0) {
          if (!lock.tryLock((long) (waitS * 1e9), TimeUnit.NANOSECONDS)) return null;
        } else if (!lock.tryLock(timeoutNanos, TimeUnit.NANOSECONDS)) {
          throw new IllegalStateException("spark-htap catalog call timed out after " + timeoutS + " s waiting for the"
              + " bridge process, busy with another call: " + label + "; is the metadata store reachable and not locked?"
              + " (" + TIMEOUT_CONF + ")");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted", e);
      }
      try {
        ObjectNode request = Ir.MAPPER.createObjectNode();
        ArrayNode args = request.putArray("argv");
        argv.forEach(args::add);
        String line = Ir.MAPPER.writeValueAsString(request);
        for (int attempt = 0; ; attempt++) {
          BlockingQueue<Object> queue = start();
          try {
            requests.write(line);
            requests.write('\n');
            requests.flush();
          } catch (IOException e) {
            // died since the last call: start it again, once
          }
          Object answer = queue.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
          if (answer == null) {
            long pid = pid();
            stop();
            throw new IllegalStateException("spark-htap catalog call timed out after " + timeoutS + " s: " + label
                + "; its bridge process (pid " + pid + ") was killed and starts again on the next call;"
                + " is the metadata store reachable and not locked? (" + TIMEOUT_CONF + ")");
          }
          if (answer == EOF) {
            String tail = tail();
            stop();
            if (attempt == 0) continue;
            throw new IllegalStateException("the spark-htap catalog bridge (" + python + " -m htap.catalog.bridge --serve)"
                + " exited while answering " + label + ":\n" + tail);
          }
          return Ir.MAPPER.readTree((String) answer);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        stop();  // its answer would be read as the next call's
        throw new IllegalStateException("interrupted", e);
      } catch (IOException e) {
        throw new IllegalStateException("unreadable answer of the spark-htap catalog bridge to " + label + ": " + e, e);
      } finally {
        lock.unlock();
      }
    }

    /** The answers of the running process, starting one if none runs. */
    private synchronized BlockingQueue<Object> start() {
      if (process != null && process.isAlive()) return answers;
      stop();
      List<String> cmd = List.of(python, "-m", "htap.catalog.bridge", "--serve");
      Process p;
      try {
        p = new ProcessBuilder(cmd).start();
      } catch (IOException e) {
        throw new IllegalStateException("cannot run " + python + " for spark-htap catalog calls: " + e.getMessage()
            + "; set spark.pyspark.python to a Python with spark-htap installed", e);
      }
      BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
      synchronized (stderrTail) {
        stderrTail.clear();
      }
      daemonThread("spark-htap-bridge-out", () -> {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
          for (String l; (l = r.readLine()) != null; ) queue.add(l);
        } catch (IOException e) {
          // the process died: EOF below
        }
        queue.add(EOF);
      });
      daemonThread("spark-htap-bridge-err", () -> {
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getErrorStream(), StandardCharsets.UTF_8))) {
          for (String l; (l = r.readLine()) != null; ) {
            synchronized (stderrTail) {
              stderrTail.addLast(l);
              if (stderrTail.size() > 40) stderrTail.removeFirst();
            }
          }
        } catch (IOException e) {
          // the process died
        }
      });
      process = p;
      requests = new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8);
      answers = queue;
      return queue;
    }

    private String tail() {
      try {
        process.waitFor(2, TimeUnit.SECONDS);  // its last words reach stderrTail
        Thread.sleep(50);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      synchronized (stderrTail) {
        return (process.isAlive() ? "" : "exit " + process.exitValue() + "\n") + String.join("\n", stderrTail);
      }
    }

    synchronized void stop() {
      if (process != null) {
        process.destroyForcibly();
        process = null;
      }
    }

    private static void daemonThread(String name, Runnable r) {
      Thread t = new Thread(r, name);
      t.setDaemon(true);
      t.start();
    }
  }

  static final class NoSuchTable extends RuntimeException {
    NoSuchTable(String message) {
      super(message);
    }
  }
}
