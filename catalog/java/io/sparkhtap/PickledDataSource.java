package io.sparkhtap;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;

import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * Spark's Python data source of one scan, whose Python instance the shim pickles itself.
 *
 * <p>Spark creates a Python data source for every scan in a Python planning worker of its own
 * ({@code pyspark.sql.worker.create_data_source}: unpickle the class, {@code cls(options)},
 * pickle the instance back), a round trip per scan before the reader's planning round trip
 * (~0.05 s of a point lookup's 0.3 s on a loaded machine, README "Per-query overhead"). Our data
 * source's constructor only stores its options, so for a read (Spark passes the read's schema)
 * the shim writes that pickle: a call of {@code htap.pushdown.datasource.data_source(options)},
 * the same instance with the options in Spark's case-insensitive dict (Python lowercases the
 * keys, as there), which the reader's planning worker unpickles as it would Spark's. Anything
 * else (no schema given) goes to Spark's worker.
 *
 * <p>The read itself is planned the same way: Spark sends that pickle to a Python planning
 * worker ({@code pyspark.sql.worker.plan_data_source_read}) for the reader's read function and
 * partitions, a worker round trip per scan on top of our planning. A batch read asks the
 * driver's bridge process instead ({@code plan-read}, htap.pushdown.read_planning), which runs
 * Spark's own code for that answer on the same reader. When that process stays busy (another
 * query's planning) for Bridge.PLAN_WAIT_S, runs another Python than the executors, or with
 * {@value #BRIDGE_PLANNING_CONF}=false (runtime-settable), Spark's
 * worker plans it as before.
 */
public final class PickledDataSource extends PythonDataSourceV2 {
  static final String BRIDGE_PLANNING_CONF = "spark.htap.bridgePlanning";
  private PythonDataSourceCreationResult created;
  private PythonDataSourceReadInfo planned;
  private static final java.util.concurrent.atomic.AtomicLong BRIDGE_PLANNED = new java.util.concurrent.atomic.AtomicLong();

  /** How many reads this JVM planned through the bridge process (for tests and operators). */
  public static long bridgePlannedReads() {
    return BRIDGE_PLANNED.get();
  }

  @Override
  public synchronized PythonDataSourceCreationResult getOrCreateDataSourceInPython(
      String shortName, CaseInsensitiveStringMap options, Option<StructType> userSpecifiedSchema) {
    if (userSpecifiedSchema.isEmpty()) {
      return super.getOrCreateDataSourceInPython(shortName, options, userSpecifiedSchema);
    }
    if (created == null) {
      created = new PythonDataSourceCreationResult(pickle(options), userSpecifiedSchema.get());
    }
    return created;
  }

  @Override
  public synchronized PythonDataSourceReadInfo getOrCreateReadInfo(
      String shortName, CaseInsensitiveStringMap options, StructType outputSchema, boolean isStreaming) {
    if (isStreaming || !SQLConf.get().getConfString(BRIDGE_PLANNING_CONF, "true").equalsIgnoreCase("true")
        || !Bridge.runsExecutorsPython()) {
      return super.getOrCreateReadInfo(shortName, options, outputSchema, isStreaming);
    }
    if (planned == null) {
      SQLConf conf = SQLConf.get();
      planned = Bridge.planRead(options, outputSchema, conf.arrowMaxRecordsPerBatch(), conf.pysparkBinaryAsBytes());
      if (planned == null) {  // the bridge stayed busy (a concurrent query's planning): Spark's worker plans it
        return super.getOrCreateReadInfo(shortName, options, outputSchema, isStreaming);
      }
      BRIDGE_PLANNED.incrementAndGet();
    }
    return planned;
  }

  /** Pickle protocol 2: {@code data_source({key: value, ...})} (sorted: the same options, the same bytes). */
  public static byte[] pickle(Map<String, String> options) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0x80);  // PROTO
    out.write(2);
    out.write('c');  // GLOBAL module \n name \n
    out.writeBytes("htap.pushdown.datasource\ndata_source\n".getBytes(StandardCharsets.US_ASCII));
    out.write('}');  // EMPTY_DICT
    Map<String, String> sorted = new TreeMap<>(options);
    if (!sorted.isEmpty()) {
      out.write('(');  // MARK
      sorted.forEach((k, v) -> {
        text(out, k);
        text(out, v);
      });
      out.write('u');  // SETITEMS
    }
    out.write(0x85);  // TUPLE1
    out.write('R');  // REDUCE
    out.write('.');  // STOP
    return out.toByteArray();
  }

  /** BINUNICODE: 'X', a 4-byte little-endian length, UTF-8. */
  private static void text(ByteArrayOutputStream out, String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    out.write('X');
    for (int i = 0; i < 4; i++) out.write((b.length >>> (8 * i)) & 0xff);
    out.writeBytes(b);
  }
}
