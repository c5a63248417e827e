package io.sparkhtap;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's Python scan, described with what was pushed into it (so EXPLAIN shows it), with size
 * estimates from the metadata (so Spark broadcasts small tables in joins).
 */
public class HtapScan implements Scan, SupportsReportStatistics {
  private final String description;
  private final List<String> tableNames;
  private final StructType outputSchema;
  private final Map<String, String> options;
  private volatile String snapshotToken;
  private volatile String snapshotTables;
  private Scan python;
  /** The driver holds this scan's leases under this owner while its query runs (LeaseKeeper). */
  private final String leaseOwner = UUID.randomUUID().toString();
  private volatile boolean planned;
  private volatile HtapScan absorbedBy;

  private final long[] estimate;  // rows, bytes; null when unknown
  private final boolean rowsKnown;  // false for a pushed aggregate (fewer rows than the table)

  HtapScan(List<String> tableNames, StructType outputSchema, Map<String, String> options, String description,
           long[] estimate, boolean rowsKnown) {
    this.tableNames = tableNames;
    this.outputSchema = outputSchema;
    this.options = options;
    this.description = description;
    this.estimate = estimate;
    this.rowsKnown = rowsKnown;
  }

  @Override
  public Statistics estimateStatistics() {
    final java.util.OptionalLong rows = estimate != null && rowsKnown ? java.util.OptionalLong.of(estimate[0]) : java.util.OptionalLong.empty();
    final java.util.OptionalLong bytes = estimate != null ? java.util.OptionalLong.of(estimate[1]) : java.util.OptionalLong.empty();
    return new Statistics() {
      @Override
      public java.util.OptionalLong sizeInBytes() {
        return bytes;
      }

      @Override
      public java.util.OptionalLong numRows() {
        return rows;
      }
    };
  }

  String leaseOwner() {
    return leaseOwner;
  }

  /** Whether Spark built the Python batch, whose planning may have taken leases. */
  boolean planned() {
    return planned;
  }

  /** The catalog's options (config, source, ...): what a bridge call for this scan needs. */
  Map<String, String> catalogOptions() {
    return options;
  }

  /** "catalog.schema.table" of every table the scan reads (several when joins were pushed). */
  List<String> tableNames() {
    return tableNames;
  }

  /** Read at the query's shared snapshot (see HtapSnapshotStrategy); before the scan is planned. */
  synchronized void setSnapshot(String token, String tables) {
    this.snapshotToken = token;
    this.snapshotTables = tables;
    this.python = null;  // rebuild with the snapshot options
  }

  boolean hasSnapshot() {
    return snapshotToken != null;
  }

  String snapshotToken() {
    return snapshotToken;
  }

  String snapshotTables() {
    return snapshotTables;
  }

  /** The scan that reads this one's whole subtree instead (HtapSubtreeStrategy), or null. */
  HtapScan absorbedBy() {
    return absorbedBy;
  }

  void absorbedBy(HtapScan scan) {
    this.absorbedBy = scan;
  }

  /** Spark's own Python scan, built on first use with the final options. */
  private synchronized Scan python() {
    if (python == null) {
      Map<String, String> all = new HashMap<>(options);
      if (snapshotToken != null) {
        all.put("snapshot_token", snapshotToken);
        all.put("snapshot_tables", snapshotTables);
      }
      all.put("lease_owner", leaseOwner);
      // A fresh Python data source per scan: Spark caches the Python reader on it, and the
      // reader carries this scan's pushed subplan and snapshot.
      // Its Python instance pickled here, not by a Python worker round trip (PickledDataSource).
      PythonDataSourceV2 ds = new PickledDataSource();
      ds.setShortName(HtapCatalog.SHORT_NAME);
      python = new PythonScanBuilder(ds, HtapCatalog.SHORT_NAME, outputSchema, new CaseInsensitiveStringMap(all)).build();
    }
    return python;
  }

  @Override
  public StructType readSchema() {
    return outputSchema;
  }

  @Override
  public String description() {
    return snapshotToken == null ? description : description + " snapshot=" + snapshotToken;
  }

  // Spark may build the Python reader (routing, snapshot, access check) behind any of these:
  // each turns our marked errors into one readable line (HtapBatch.translate).

  @Override
  public Batch toBatch() {
    try {
      planned = true;
      return new HtapBatch(python().toBatch());
    } catch (Exception e) {
      throw HtapBatch.translate(e);
    }
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    try {
      return python().supportedCustomMetrics();
    } catch (Exception e) {
      throw HtapBatch.translate(e);
    }
  }

  @Override
  public CustomTaskMetric[] reportDriverMetrics() {
    try {
      return python().reportDriverMetrics();
    } catch (Exception e) {
      throw HtapBatch.translate(e);
    }
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    try {
      return python().columnarSupportMode();
    } catch (Exception e) {
      throw HtapBatch.translate(e);
    }
  }
}
