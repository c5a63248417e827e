package io.sparkhtap;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * Spark's Python batch; planning it runs the Python reader (routing, snapshot, access check).
 * A denied access check surfaces as a SecurityException naming the table and user, not as a
 * Python traceback.
 */
public class HtapBatch implements Batch {
  static final String PERMISSION_MARKER = "HTAP_PERMISSION_DENIED";
  private final Batch python;

  HtapBatch(Batch python) {
    this.python = python;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try {
      return python.planInputPartitions();
    } catch (RuntimeException e) {
      for (Throwable t = e; t != null; t = t.getCause()) {
        String m = t.getMessage();
        if (m != null && m.contains(PERMISSION_MARKER)) {
          int at = m.indexOf(PERMISSION_MARKER);
          int end = m.indexOf('\n', at);
          throw new SecurityException(m.substring(at, end < 0 ? m.length() : end), e);
        }
      }
      throw e;
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return python.createReaderFactory();
  }
}
