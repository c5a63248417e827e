package io.sparkhtap;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/** Spark's Python scan, described with what was pushed into it (so EXPLAIN shows it). */
public class HtapScan implements Scan {
  private final Scan python;
  private final String description;

  HtapScan(Scan python, String description) {
    this.python = python;
    this.description = description;
  }

  @Override
  public StructType readSchema() {
    return python.readSchema();
  }

  @Override
  public String description() {
    return description;
  }

  @Override
  public Batch toBatch() {
    return new HtapBatch(python.toBatch());
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return python.supportedCustomMetrics();
  }

  @Override
  public CustomTaskMetric[] reportDriverMetrics() {
    return python.reportDriverMetrics();
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return python.columnarSupportMode();
  }
}
