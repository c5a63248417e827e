package io.sparkhtap;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

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
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegralType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's Python scan, described with what was pushed into it (so EXPLAIN shows it), with size
 * estimates from the metadata (so Spark broadcasts small tables in joins).
 */
public class HtapScan implements Scan, SupportsReportStatistics, SupportsRuntimeV2Filtering {
  /** A runtime IN filter with more values than this is applied as the range of its values. */
  static final int MAX_RUNTIME_VALUES = 1000;
  /** The pushed plan as planned, before any runtime filter was added (see {@link #filter}). */
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

  private final long[] estimate;  // rows, bytes[, the table's partitions]; null when unknown
  private final boolean rowsKnown;  // false for a pushed aggregate (fewer rows than the table)
  private final String partitionColumn;  // the one table's partition column (its first key column); null: unknown

  HtapScan(List<String> tableNames, StructType outputSchema, Map<String, String> options, String description,
           long[] estimate, boolean rowsKnown, String partitionColumn) {
    this.tableNames = tableNames;
    this.outputSchema = outputSchema;
    this.options = options;
    this.description = description;
    this.estimate = estimate;
    this.rowsKnown = rowsKnown;
    this.partitionColumn = partitionColumn;
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

  /** The partitions of the one table this scan reads (-1: unknown, or several tables). */
  long partitions() {
    return estimate != null && estimate.length > 2 ? estimate[2] : -1;
  }

  /** The column whose key ranges are the one table's partitions (null: unknown, or several tables). */
  String partitionColumn() {
    return partitionColumn;
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

  /** `now` or a seq: the query reads a replica at or past the source's position then. */
  static final String READ_AFTER_CONF = "spark.htap.readAfter";
  /** Seconds planning waits for the replica to reach that position (default 10). */
  static final String READ_AFTER_TIMEOUT_CONF = "spark.htap.readAfterTimeoutSeconds";
  /** true: the query may read the changes the service holds in memory, not yet checkpointed. */
  static final String READ_TAIL_CONF = "spark.htap.readTail";

  /** Spark's own Python scan, built on first use with the final options. */
  private synchronized Scan python() {
    if (python == null) {
      Map<String, String> all = new HashMap<>(options);
      if (snapshotToken != null) {
        all.put("snapshot_token", snapshotToken);
        all.put("snapshot_tables", snapshotTables);
      }
      all.put("lease_owner", leaseOwner);
      // Read after a source position, per session (over the catalog's option): planning waits
      // until the replica covers it (htap.pushdown.planning.await_read_after).
      String readAfter = SQLConf.get().getConfString(READ_AFTER_CONF, null);
      if (readAfter != null && !readAfter.isBlank()) all.put("read_after", readAfter);
      String timeout = SQLConf.get().getConfString(READ_AFTER_TIMEOUT_CONF, null);
      if (timeout != null && !timeout.isBlank()) all.put("read_after_timeout_s", timeout);
      String readTail = SQLConf.get().getConfString(READ_TAIL_CONF, null);
      if (readTail != null && !readTail.isBlank()) all.put("read_tail", readTail);
      // A fresh Python data source per scan: Spark caches the Python reader on it, and the
      // reader carries this scan's pushed plan and snapshot.
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
    String readAfter = setting(READ_AFTER_CONF, "read_after");
    String timeout = setting(READ_AFTER_TIMEOUT_CONF, "read_after_timeout_s");
    return description + (readAfter == null ? "" : " readAfter=" + readAfter + " (planning waits until the replica"
        + " covers that source position" + (timeout == null ? "" : ", at most " + timeout + " s") + ")")
        + ("true".equalsIgnoreCase(setting(READ_TAIL_CONF, "read_tail")) ? " readTail=true (the snapshot may be the"
        + " service's visible seq: changes not yet checkpointed are read from its memory)" : "")
        + (snapshotToken == null ? "" : " snapshot=" + snapshotToken);
  }

  /** A session conf, else the catalog option, else null (for EXPLAIN; Python checks the values). */
  private String setting(String conf, String option) {
    return setting(conf, option, options);
  }

  /** A session conf, else the option in {@code options}, else null (ViewRewrite reads readTail so too). */
  static String setting(String conf, String option, Map<String, String> options) {
    String session = SQLConf.get().getConfString(conf, null);
    String value = session != null && !session.isBlank() ? session : options.get(option);
    return value == null || value.isBlank() ? null : value.trim();
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
   * Add Spark's runtime filters to the pushed plan's scan; the scan's Python reader is built again
   * with them. (Spark then plans the partitions again, but reads them with the reader factory of
   * the first plan: each partition carries its own pushed plan, so that is exact.) Only IN
   * filters are taken: of up to MAX_RUNTIME_VALUES values as they are, longer ones as the range
   * [min, max] of their values where that range surely holds them all ({@link #range}), else not
   * at all. A range keeps rows the IN would not: Spark's join drops them.
   */
  @Override
  public synchronized void filter(Predicate[] predicates) {
    boolean ansi = SQLConf.get().ansiEnabled();
    List<ObjectNode> added = new java.util.ArrayList<>();
    for (Predicate p : predicates) {
      if (!p.name().equals("IN")) continue;  // what dynamic partition pruning sends
      try {
        if (p.children().length - 1 > MAX_RUNTIME_VALUES) {
          added.addAll(range(p, ansi));
          continue;
        }
        ExprTranslator.Typed in = ExprTranslator.translate(p, outputSchema, ansi);
        if (in != null) added.add(in.json);
      } catch (Throwable t) {
        Fallbacks.record("runtime filter", String.join(",", tableNames), p, t);
      }
    }
    if (added.isEmpty()) return;
    if (plannedPushed == null) plannedPushed = options.get("pushed");
    // The planned plan plus these filters (a later call replaces them, never adds up).
    ObjectNode pushed = Ir.parse(plannedPushed);
    ArrayNode filter = (ArrayNode) pushed.get("scans").get(0).get("filter");
    for (ObjectNode json : added) filter.add(json);
    options.put("pushed", Ir.text(pushed));
    python = null;  // rebuilt with the new plan
  }

  /**
   * `min <= col AND col <= max` of a long IN's non-null values, for value types whose order is
   * the same in Java, the replica and every source (integers, decimals, dates, timestamps: no
   * strings, whose collations differ, and no floating point); none otherwise.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private List<ObjectNode> range(Predicate in, boolean ansi) {
    Expression[] kids = in.children();
    ExprTranslator.Typed column = ExprTranslator.translate(kids[0], outputSchema, ansi);
    if (column == null) return List.of();
    DataType t = column.type;
    boolean ordered = t instanceof IntegralType || t instanceof DecimalType
        || t instanceof DateType || t instanceof TimestampType
        || t instanceof TimestampNTZType;
    if (!ordered) return List.of();
    Comparable min = null;
    Comparable max = null;
    for (int i = 1; i < kids.length; i++) {
      if (!(kids[i] instanceof Literal)) return List.of();
      Literal<?> lit = (Literal<?>) kids[i];
      if (lit.value() == null) continue;  // matches nothing
      if (!lit.dataType().equals(t) || !(lit.value() instanceof Comparable)) return List.of();
      Comparable c = (Comparable) lit.value();
      if (min == null || c.compareTo(min) < 0) min = c;
      if (max == null || c.compareTo(max) > 0) max = c;
    }
    if (min == null) return List.of();
    DataType bool = DataTypes.BooleanType;
    return List.of(Ir.call(">=", bool, column.json, typed(min, t)), Ir.call("<=", bool, column.json.deepCopy(), typed(max, t)));
  }

  private static ObjectNode typed(Object value, DataType t) {
    ObjectNode n = Ir.MAPPER.createObjectNode();
    n.set("lit", ExprTranslator.literal(value, t));
    n.put("type", t.catalogString());
    return n;
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
