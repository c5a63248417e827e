package io.sparkhtap;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An HTAP table's change feed, {@code <catalog>.changes.<schema>.<table>}: the table's columns
 * plus {@code _change_type}, {@code _commit_seq}, {@code _commit_timestamp}, read in batch
 * ({@code SELECT ... FROM shop.changes.public.orders WITH ('startingVersion' = '...')}) or as a
 * stream ({@code spark.readStream.option("startingVersion", "snapshot").table(...)}). The read's
 * options (htap.pushdown.change_feed) go to the Python {@code htap} data source with
 * {@code readChangeFeed}; nothing is pushed (a range's rows are computed whole).
 */
public class ChangeFeedTable extends HtapTable {
  ChangeFeedTable(String name, StructType schema, Map<String, String> options) {
    super(name, schema, options, null, java.util.Map.of(), java.util.List.of(), null, null);
  }

  @Override
  public Set<TableCapability> capabilities() {
    return Set.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap read) {
    Map<String, String> all = new HashMap<>(options);
    for (Map.Entry<String, String> e : read.entrySet()) {
      all.put(e.getKey().toLowerCase(), e.getValue());
    }
    all.put("readchangefeed", "true");
    return () -> new FeedScan(all);
  }

  /** Spark's own Python scan over the change feed's options, its errors made readable. */
  private final class FeedScan implements Scan {
    private final Scan python;

    FeedScan(Map<String, String> all) {
      PythonDataSourceV2 ds = new PickledDataSource();
      ds.setShortName(HtapCatalog.SHORT_NAME);
      python = new PythonScanBuilder(ds, HtapCatalog.SHORT_NAME, schema, new CaseInsensitiveStringMap(all)).build();
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public String description() {
      return "HtapChangeFeed " + name;
    }

    @Override
    public Batch toBatch() {
      try {
        return python.toBatch();
      } catch (Exception e) {
        throw HtapBatch.translate(e);
      }
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      try {
        return python.toMicroBatchStream(checkpointLocation);
      } catch (Exception e) {
        throw HtapBatch.translate(e);
      }
    }
  }
}
