package io.sparkhtap;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.connector.read.SupportsRuntimeV2Filtering;
import org.apache.spark.sql.internal.connector.PredicateUtils;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's Python scan, described with what was pushed into it (so EXPLAIN shows it), with size
 * estimates from the metadata (so Spark broadcasts small tables in joins).
 */
public class HtapScan implements Scan, SupportsReportStatistics, SupportsRuntimeV2Filtering {
  /** A runtime IN filter with more values than this is applied as the range of its values. */
  static final int MAX_RUNTIME_VALUES = 1000;
  /**
   * Value types whose order is the same in Java, the replica and every source (so the range of an
   * IN's values holds all of them): no strings (collations differ) and no floating point.
   */
  private static final java.util.Set<Class<?>> RANGE_TYPES = java.util.Set.of(
      Byte.class, Short.class, Integer.class, Long.class, java.math.BigDecimal.class,
      java.sql.Date.class, java.time.LocalDate.class, java.sql.Timestamp.class, java.time.Instant.class,
      java.time.LocalDateTime.class);
  /** The pushed subplan as planned, before any runtime filter was added (see {@link #filter}). */
  private String plannedPushed;

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

  /**
   * The columns Spark may filter this scan by at run time (dynamic partition pruning: the keys of
   * a broadcast join's other side): every column of a single table's row scan. A filter on the
   * first key column prunes the table's partitions by key range; any filter is applied in the
   * partition reads. Scans with a pushed aggregate, limit or join report none (their rows are
   * not the table's).
   */
  @Override
  public NamedReference[] filterAttributes() {
    if (!rowsKnown || tableNames.size() != 1) return new NamedReference[0];
    String[] names = outputSchema.fieldNames();
    NamedReference[] refs = new NamedReference[names.length];
    for (int i = 0; i < names.length; i++) refs[i] = Expressions.column(names[i]);
    return refs;
  }

  /**
   * Add Spark's runtime filters to the pushed subplan; the scan's Python reader is built again
   * with them. (Spark then plans the partitions again, but reads them with the reader factory of
   * the first plan: each partition carries its own pushed subplan, so that is exact.) Only IN
   * filters are taken: of up to MAX_RUNTIME_VALUES values as they are, longer ones as the range
   * [min, max] of their values where that range surely holds them all (RANGE_TYPES), else not at
   * all. A range keeps rows the IN would not: Spark's join drops them.
   */
  @Override
  public synchronized void filter(Predicate[] predicates) {
    List<ObjectNode> added = new java.util.ArrayList<>();
    for (Predicate p : predicates) {
      scala.Option<Filter> v1 = PredicateUtils.toV1(p);
      if (v1.isEmpty()) continue;
      Filter f = v1.get();
      // Only a whole IN (what dynamic partition pruning sends): toV1 can convert a part of a
      // compound predicate, and that part as the whole would drop rows.
      if (!p.name().equals("IN") || !(f instanceof In)) continue;
      for (Filter one : ((In) f).values().length > MAX_RUNTIME_VALUES ? range((In) f) : List.of(f)) {
        ObjectNode json = PushedJson.filter(one);
        if (json != null) added.add(json);
      }
    }
    if (added.isEmpty()) return;
    if (plannedPushed == null) plannedPushed = options.get("pushed");
    try {  // the planned subplan plus these filters (a later call replaces them, never adds up)
      ObjectNode pushed = (ObjectNode) PushedJson.MAPPER.readTree(plannedPushed);
      ArrayNode filters = pushed.has("filters") ? (ArrayNode) pushed.get("filters") : pushed.putArray("filters");
      for (ObjectNode json : added) filters.add(json);
      options.put("pushed", PushedJson.MAPPER.writeValueAsString(pushed));
    } catch (JsonProcessingException | ClassCastException e) {
      return;  // not a pushed subplan this scan can add filters to
    }
    python = null;  // rebuilt with the new subplan
  }

  /** `min <= col AND col <= max` of a long IN's non-null values; none if their order is unsure. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  static List<Filter> range(In in) {
    Comparable min = null;
    Comparable max = null;
    for (Object v : in.values()) {
      if (v == null) continue;  // matches nothing
      if (!RANGE_TYPES.contains(v.getClass()) || (min != null && v.getClass() != min.getClass())) return List.of();
      Comparable c = (Comparable) v;
      if (min == null || c.compareTo(min) < 0) min = c;
      if (max == null || c.compareTo(max) > 0) max = c;
    }
    if (min == null) return List.of();
    return List.of(new GreaterThanOrEqual(in.attribute(), min), new LessThanOrEqual(in.attribute(), max));
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
