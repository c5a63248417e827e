package io.sparkhtap;

import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.catalyst.util.CharVarcharUtils;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An HTAP table as Spark sees it: a schema and a scan builder, and the views of it a query's
 * aggregate may read instead ({@link ViewRewrite}).
 */
public class HtapTable implements SupportsRead {
  final String name;
  final StructType schema;
  final Map<String, String> options;
  private final long[] stats;  // row versions, bytes; null when unknown (system tables)
  private final Map<String, FilterEstimate.Column> columns;  // column statistics; empty when unknown
  final List<ViewRewrite.View> views;  // readable views of this table, smallest first
  // A FOR VERSION|TIMESTAMP AS OF read: the seq it reads, which every view listed holds (null:
  // not time travel, or a seq not fixed yet, and then no view is listed)
  final Long viewsAt;
  final HtapCatalog catalog;  // loads a view's states (null for tables no view is read instead of)

  HtapTable(String name, StructType schema, Map<String, String> options, long[] stats,
            Map<String, FilterEstimate.Column> columns, List<ViewRewrite.View> views, Long viewsAt,
            HtapCatalog catalog) {
    this.name = name;
    this.schema = schema;
    this.options = options;
    this.stats = stats;
    this.columns = columns;
    this.views = views;
    this.viewsAt = viewsAt;
    this.catalog = catalog;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return Set.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
    // CHAR(n) columns are strings to the reader: Spark pads what it compares them with itself
    // (its CHAR semantics), the pushed plan sees plain strings.
    StructType strings = (StructType) CharVarcharUtils.replaceCharVarcharWithStringInSchema(schema);
    return new HtapScanBuilder(name, strings, options, stats, columns);
  }
}
