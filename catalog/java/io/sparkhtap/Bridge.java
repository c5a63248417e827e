package io.sparkhtap;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;

/**
 * Catalog calls answered by Python ({@code python -m htap.catalog.bridge}): listing tables,
 * failover toggles. The metadata store has one implementation, in Python; the shim stays glue.
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

  /** Exit codes of htap.catalog.bridge (keep in sync with catalog/bridge.py). */
  static final int EXIT_ERROR = 2;
  static final int EXIT_NO_SUCH_TABLE = 3;
  /** A catalog call reads or writes a few metadata rows; anything this slow is stuck. */
  static final long TIMEOUT_SECONDS = 120;

  /**
   * Run a bridge command and return its JSON answer; its one-line error becomes the exception.
   * Both output streams are drained concurrently (a long traceback on stderr must not block the
   * child while we read stdout), and a child that does not finish in time is killed.
   */
  static JsonNode call(Map<String, String> options, String... args) {
    List<String> cmd = new ArrayList<>(List.of(python(), "-m", "htap.catalog.bridge", "--config", options.get("config")));
    if (options.containsKey("source")) {
      cmd.add("--source");
      cmd.add(options.get("source"));
    }
    cmd.addAll(List.of(args));
    Process p;
    try {
      p = new ProcessBuilder(cmd).start();
    } catch (IOException e) {
      throw new IllegalStateException("cannot run " + cmd.get(0) + " for spark-htap catalog calls: " + e.getMessage()
          + "; set spark.pyspark.python to a Python with spark-htap installed", e);
    }
    CompletableFuture<String> out = drain(p.getInputStream());
    CompletableFuture<String> err = drain(p.getErrorStream());
    try {
      if (!p.waitFor(TIMEOUT_SECONDS, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new IllegalStateException("spark-htap catalog call timed out after " + TIMEOUT_SECONDS + " s: " + cmd
            + "; is the metadata store reachable and not locked?");
      }
      int code = p.exitValue();
      String message = err.get(TIMEOUT_SECONDS, TimeUnit.SECONDS).strip();
      if (code == EXIT_NO_SUCH_TABLE) {
        throw new NoSuchTable(message);
      }
      if (code == EXIT_ERROR) {
        throw new IllegalArgumentException(message);
      }
      if (code != 0) {
        throw new IllegalStateException("spark-htap catalog call failed (exit " + code + "): " + cmd + "\n" + message);
      }
      return PushedJson.MAPPER.readTree(out.get(TIMEOUT_SECONDS, TimeUnit.SECONDS));
    } catch (InterruptedException e) {
      p.destroyForcibly();
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    } catch (ExecutionException | TimeoutException | IOException e) {
      throw new IllegalStateException("cannot read the answer of " + cmd + ": " + e, e);
    }
  }

  private static CompletableFuture<String> drain(InputStream in) {
    return CompletableFuture.supplyAsync(() -> {
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      try (in) {
        in.transferTo(buf);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return buf.toString(StandardCharsets.UTF_8);
    });
  }

  static final class NoSuchTable extends RuntimeException {
    NoSuchTable(String message) {
      super(message);
    }
  }
}
