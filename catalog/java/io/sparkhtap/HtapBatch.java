package io.sparkhtap;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * Spark's Python batch; planning it runs the Python reader (routing, snapshot, access check).
 * A denied access check surfaces as a SecurityException naming the table and user, and any other
 * error of ours (routing, snapshot) as an IllegalArgumentException of one line (PySpark shows it
 * as such), not as a Python traceback.
 */
public class HtapBatch implements Batch {
  static final String PERMISSION_MARKER = "HTAP_PERMISSION_DENIED";
  static final String ERROR_MARKER = "HTAP_ERROR: ";
  private final Batch python;

  HtapBatch(Batch python) {
    this.python = python;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try {
      return python.planInputPartitions();
    } catch (Exception e) {  // Spark's AnalysisException is a checked exception in Java's eyes
      throw translate(e);
    }
  }

  /**
   * Our marked Python errors as one-line Java exceptions; anything else rethrown unchanged
   * (Spark wraps a failing Python reader in an AnalysisException, checked for javac).
   */
  static RuntimeException translate(Exception e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      String m = t.getMessage();
      if (m != null && m.contains(PERMISSION_MARKER)) {
        int at = m.indexOf(PERMISSION_MARKER);
        int end = m.indexOf('\n', at);
        return new SecurityException(m.substring(at, end < 0 ? m.length() : end), e);
      }
      if (m != null && m.contains(ERROR_MARKER)) {
        int at = m.indexOf(ERROR_MARKER) + ERROR_MARKER.length();
        int end = m.indexOf('\n', at);
        return new IllegalArgumentException(m.substring(at, end < 0 ? m.length() : end));
      }
    }
    return HtapBatch.<RuntimeException>sneaky(e);
  }

  @SuppressWarnings("unchecked")
  private static <E extends Exception> E sneaky(Exception e) throws E {
    throw (E) e;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return python.createReaderFactory();
  }
}
