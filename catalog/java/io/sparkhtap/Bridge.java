package io.sparkhtap;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;

/**
 * Catalog calls answered by Python ({@code python -m htap.catalog.bridge}): listing tables,
 * failover toggles. The metadata store has one implementation, in Python; the shim stays glue.
 */
final class Bridge {
  private Bridge() {}

  static String python() {
    SparkConf conf = SparkSession.active().sparkContext().getConf();
    for (String key : new String[] {"spark.pyspark.driver.python", "spark.pyspark.python"}) {
      if (conf.contains(key)) return conf.get(key);
    }
    for (String env : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String v = System.getenv(env);
      if (v != null && !v.isEmpty()) return v;
    }
    return "python3";
  }

  /** Run a bridge command and return its JSON answer; its one-line error becomes the exception. */
  static JsonNode call(Map<String, String> options, String... args) {
    List<String> cmd = new ArrayList<>(List.of(python(), "-m", "htap.catalog.bridge", "--config", options.get("config")));
    if (options.containsKey("source")) {
      cmd.add("--source");
      cmd.add(options.get("source"));
    }
    cmd.addAll(List.of(args));
    try {
      Process p = new ProcessBuilder(cmd).start();
      String out = read(p.getInputStream());
      String err = read(p.getErrorStream());
      int code = p.waitFor();
      if (code != 0) {
        String message = err.strip();
        if (message.contains(HtapCatalog.NO_SUCH_TABLE_MARKER)) {
          throw new NoSuchTable(message);
        }
        throw new IllegalArgumentException(message.isEmpty() ? "htap bridge failed: " + cmd : message);
      }
      return PushedJson.MAPPER.readTree(out);
    } catch (IOException e) {
      throw new IllegalStateException("cannot run " + cmd.get(0) + " for spark-htap catalog calls: " + e.getMessage()
          + "; set spark.pyspark.python to a Python with spark-htap installed", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }

  private static String read(InputStream in) throws IOException {
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    in.transferTo(buf);
    return buf.toString(StandardCharsets.UTF_8);
  }

  static final class NoSuchTable extends RuntimeException {
    NoSuchTable(String message) {
      super(message);
    }
  }
}
