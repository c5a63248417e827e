package io.sparkhtap;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NoSuchViewException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableSummary;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.Relation;
import org.apache.spark.sql.connector.catalog.RelationCatalog;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.MetadataBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark catalog for HTAP tables: {@code spark.sql.catalog.<name> = io.sparkhtap.HtapCatalog}.
 *
 * <p>Glue only. Table schemas come from the Python {@code htap} data source (which reads the
 * replica's metadata store); reads go through {@link HtapScanBuilder}. Namespace {@code views}
 * holds derived views, which Spark reads as views ({@link #loadView}); {@code changes} holds
 * change feeds; {@code htap} the system tables.
 */
public class HtapCatalog implements RelationCatalog {
  static final String SHORT_NAME = "htap";
  /** Catalog options, passed on to the Python data source (htap.pushdown.datasource). */
  private static final Set<String> OPTIONS =
      Set.of("config", "source", "route", "user", "password", "password_file", "as_of_seq", "source_snapshot",
          "executor_metadata", "read_after", "read_after_timeout_s", "read_tail");

  private String name;
  private Map<String, String> options;

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    for (String key : options.keySet()) {
      if (!OPTIONS.contains(key.toLowerCase())) {
        throw new IllegalArgumentException(
            "Unknown option spark.sql.catalog." + name + "." + key
                + "; spark-htap catalogs take: " + String.join(", ", OPTIONS)
                + " (config = path of htap.toml, source = source name in it, route = auto|replica|source,"
                + " user = source user whose privileges reads must respect, password / password_file = its password"
                + " (access.mode = \"login\"), as_of_seq, source_snapshot,"
                + " executor_metadata = the metadata store as executors read it, read-only)");
      }
    }
    if (!options.containsKey("config")) {
      throw new IllegalArgumentException(
          "spark.sql.catalog." + name + ".config is not set: point it at your htap.toml "
              + "(`htap spark-conf` prints the full Spark configuration)");
    }
    this.options = new HashMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      this.options.put(e.getKey().toLowerCase(), e.getValue());
    }
    // Every option's value is checked now (route, as_of_seq, the config file and the source in
    // it), naming the option, rather than by the first read that plans with it.
    Map<String, String> checked = new java.util.TreeMap<>(this.options);
    checked.remove("password");  // never in a call's arguments (a failing call prints them)
    try {
      Bridge.call(this.options, "check-catalog", name, Ir.MAPPER.writeValueAsString(checked));
    } catch (java.io.IOException e) {
      throw new IllegalStateException("cannot write the catalog's options as JSON: " + e, e);
    }
    // The driver holds running queries' leases and marks damaged tables (executors only read).
    HtapQueryListener.install(SparkSession.active().sparkContext());
    Bridge.python();  // remembered for the listener's calls
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listTables(String[] namespace) {
    return list(namespace).stream().filter(i -> !isViews(i)).toArray(Identifier[]::new);
  }

  @Override
  public Identifier[] listViews(String[] namespace) {
    return list(namespace).stream().filter(HtapCatalog::isViews).toArray(Identifier[]::new);
  }

  /** {@code SHOW TABLES}: the tables, and in namespace {@code views} the derived views. */
  @Override
  public TableSummary[] listRelationSummaries(String[] namespace) {
    return list(namespace).stream()
        .map(i -> TableSummary.of(i, isViews(i) ? TableSummary.VIEW_TABLE_TYPE : TableSummary.FOREIGN_TABLE_TYPE))
        .toArray(TableSummary[]::new);
  }

  private List<Identifier> list(String[] namespace) {
    List<Identifier> out = new ArrayList<>();
    for (JsonNode t : Bridge.call(options, "list-tables", String.join(".", namespace))) {
      out.add(Identifier.of(new String[] {t.get(0).asText()}, t.get(1).asText()));
    }
    return out;
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return load(ident, Map.of());
  }

  /** A table, or in namespace {@code views} a derived view ({@link #loadView}). */
  @Override
  public Relation loadRelation(Identifier ident) throws NoSuchTableException {
    if (!isViews(ident)) return load(ident, Map.of());
    try {
      return loadView(ident);
    } catch (NoSuchViewException e) {
      throw new NoSuchTableException(ident);
    }
  }

  /** {@code FOR VERSION AS OF <seq>}: a commit sequence (Postgres: an LSN, as 0/16B3748 or an integer). */
  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return load(ident, Map.of("as_of_version", version));
  }

  /** {@code FOR TIMESTAMP AS OF <ts>}: Spark passes microseconds since the epoch. */
  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return load(ident, Map.of("as_of_time", Double.toString(timestampMicros / 1e6)));
  }

  /** The namespace of change feeds: {@code <catalog>.changes.<schema>.<table>} (ChangeFeedTable). */
  static final String CHANGES = "changes";

  private Table load(Identifier ident, Map<String, String> extra) throws NoSuchTableException {
    if (ident.namespace().length == 2 && ident.namespace()[0].equalsIgnoreCase(CHANGES) && extra.isEmpty()) {
      return loadChanges(ident);
    }
    // A view is a view to Spark (loadView): its own SQL over its table, which ViewRewrite reads
    // from the view's states. Spark time-travels tables only; the same SQL over the table
    // FOR VERSION|TIMESTAMP AS OF is answered from the view's states at that seq.
    if (isViews(ident) && !extra.isEmpty()) throw viewTimeTravel(ident, extra);
    if (ident.namespace().length != 1 || isViews(ident)) {
      throw new NoSuchTableException(ident);
    }
    return loadHtap(ident, extra);
  }

  /** Why {@code views.<name> FOR ... AS OF} is refused, and the query that does it instead. */
  private UnsupportedOperationException viewTimeTravel(Identifier ident, Map<String, String> extra)
      throws NoSuchTableException {
    List<String> args = new ArrayList<>(List.of("view-sql", ident.name(), name));
    args.addAll(travelArgs(extra));
    String sql;
    try {
      sql = Bridge.call(options, args.toArray(new String[0])).get("sql").asText();
    } catch (Bridge.NoSuchTable e) {
      throw new NoSuchTableException(ident);
    }
    return new UnsupportedOperationException("Spark has no time travel on a view, and " + name + "." + VIEWS + "."
        + ident.name() + " is a view; run its SQL with the time travel on its tables, which Spark answers from the"
        + " view's groups at that seq: " + sql);
  }

  /** A time-travel read's options ({@code as_of_version}, {@code as_of_time}) as bridge arguments. */
  private static List<String> travelArgs(Map<String, String> extra) {
    List<String> out = new ArrayList<>();
    extra.forEach((k, v) -> out.add("--" + k.replace('_', '-') + "=" + v));
    return out;
  }

  /**
   * The stored states of view {@code name} (ViewRewrite reads them in place of its SQL), at
   * {@code seq} (null: the query's snapshot).
   */
  HtapTable loadStates(String view, Long seq) throws NoSuchTableException {
    Map<String, String> extra = seq == null ? Map.of() : Map.of("as_of_version", Long.toString(seq));
    return loadHtap(Identifier.of(new String[] {VIEWS}, view), extra);
  }

  private HtapTable loadHtap(Identifier ident, Map<String, String> extra) throws NoSuchTableException {
    Map<String, String> tableOptions = new HashMap<>(options);
    tableOptions.putAll(extra);
    tableOptions.put("table", ident.namespace()[0] + "." + ident.name());
    // The schema and statistics from the driver's bridge process (one metadata read), not from
    // the Python data source's inferSchema: that is a round trip to a Python planning worker per
    // table and query.
    StructType schema;
    Map<String, FilterEstimate.Column> columns;
    List<ViewRewrite.View> views;
    Long viewsAt;
    try {
      List<String> args = new ArrayList<>(List.of("table-schema", tableOptions.get("table")));
      if (!isViews(ident)) args.addAll(travelArgs(extra));  // a time-travel read: which views hold its seq
      com.fasterxml.jackson.databind.JsonNode answer = Bridge.call(options, args.toArray(new String[0]));
      schema = StructType.fromDDL(answer.get("ddl").asText());
      columns = FilterEstimate.parse(answer.get("columns"));
      views = ViewRewrite.View.parse(answer.get("views"));
      JsonNode at = answer.get("views_at");
      viewsAt = at == null || at.isNull() ? null : at.asLong();
    } catch (Bridge.NoSuchTable e) {
      throw new NoSuchTableException(ident);
    }
    // row versions, bytes of the live deltas, partitions, the partition column's position (spark_ddl puts them on the
    // first column)
    long[] stats = null;
    if (schema.fields().length > 0) {
      StructField first = schema.fields()[0];
      scala.Option<String> comment = first.getComment();
      if (comment.isDefined() && comment.get().startsWith(STATS_COMMENT)) {
        stats = new long[] {0, 0, -1, -1};
        List<String> names = List.of("rows", "bytes", "parts", "key");
        for (String part : comment.get().substring(STATS_COMMENT.length()).split(";")) {
          String[] kv = part.split("=", 2);
          stats[names.indexOf(kv[0])] = Long.parseLong(kv[1]);
        }
        StructField[] fields = schema.fields().clone();
        Metadata kept = new MetadataBuilder().withMetadata(first.metadata()).remove("comment").build();  // CHAR(n)'s stays
        fields[0] = new StructField(first.name(), first.dataType(), first.nullable(), kept);
        schema = new StructType(fields);
      }
    }
    return new HtapTable(name + "." + ident.namespace()[0] + "." + ident.name(), schema, tableOptions, stats, columns,
        views, viewsAt, this);
  }

  /** The namespace of derived views: {@code <catalog>.views.<name>} (htap views create). */
  static final String VIEWS = "views";

  private static boolean isViews(Identifier ident) {
    return ident.namespace().length == 1 && ident.namespace()[0].equalsIgnoreCase(VIEWS);
  }

  /**
   * A derived view as Spark reads it: its SQL over its table, in this catalog. Spark analyzes
   * and computes it as any query; ViewRewrite then answers the aggregate from the view's
   * states when it can (and from the table, replica or source, when it cannot: failover of a
   * view is its SQL run on the source).
   */
  @Override
  public View loadView(Identifier ident) throws NoSuchViewException {
    if (!isViews(ident)) throw new NoSuchViewException(ident);
    String sql;
    try {
      sql = Bridge.call(options, "view-sql", ident.name(), name).get("sql").asText();
    } catch (Bridge.NoSuchTable e) {
      throw new NoSuchViewException(ident);
    }
    StructType schema = SparkSession.active().sql(sql).schema();
    View.Builder builder = new View.Builder()
        .withQueryText(sql)
        .withCurrentCatalog(name)
        .withCurrentNamespace(new String[0])
        .withQueryColumnNames(schema.fieldNames());
    builder.withSchema(schema);
    builder.withComment("spark-htap derived view (htap views create)");
    return builder.build();
  }

  @Override
  public View createView(Identifier ident, View view) {
    throw new UnsupportedOperationException(VIEWS_BY_CLI);
  }

  @Override
  public View replaceView(Identifier ident, View view) {
    throw new UnsupportedOperationException(VIEWS_BY_CLI);
  }

  @Override
  public boolean dropView(Identifier ident) {
    throw new UnsupportedOperationException(VIEWS_BY_CLI);
  }

  @Override
  public void renameView(Identifier oldIdent, Identifier newIdent) {
    throw new UnsupportedOperationException(VIEWS_BY_CLI);
  }

  private static final String VIEWS_BY_CLI =
      "spark-htap views are defined and dropped with `htap views create|drop` (the service keeps them)";

  private Table loadChanges(Identifier ident) throws NoSuchTableException {
    Map<String, String> tableOptions = new HashMap<>(options);
    String table = ident.namespace()[1] + "." + ident.name();
    tableOptions.put("table", table);
    StructType schema;
    try {
      schema = StructType.fromDDL(Bridge.call(options, "table-schema", table, "--changes").get("ddl").asText());
    } catch (Bridge.NoSuchTable e) {
      throw new NoSuchTableException(ident);
    }
    return new ChangeFeedTable(name + "." + CHANGES + "." + table, schema, tableOptions);
  }

  static final String STATS_COMMENT = "htap.stats:";  // keep in sync with htap.pushdown.spark_types

  /**
   * {@code ALTER TABLE ... SET TBLPROPERTIES ('htap.failover'='true'|'false', 'htap.max_staleness'='<s>')}:
   * per-table routing settings, kept in the metadata store. Anything else belongs to the source.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    String table = ident.namespace()[0] + "." + ident.name();
    for (TableChange change : changes) {
      if (change instanceof TableChange.SetProperty) {
        TableChange.SetProperty set = (TableChange.SetProperty) change;
        callForTable(ident, "set-property", table, set.property(), set.value());
      } else if (change instanceof TableChange.RemoveProperty) {
        callForTable(ident, "set-property", table, ((TableChange.RemoveProperty) change).property(), "");
      } else {
        throw new UnsupportedOperationException(
            "HTAP tables follow their source: change " + table + " in the source; spark-htap only takes"
                + " SET TBLPROPERTIES ('htap.failover'=..., 'htap.max_staleness'=...)");
      }
    }
    return loadTable(ident);
  }

  private void callForTable(Identifier ident, String... args) throws NoSuchTableException {
    try {
      Bridge.call(options, args);
    } catch (Bridge.NoSuchTable e) {
      throw new NoSuchTableException(ident);
    }
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw new UnsupportedOperationException("remove an HTAP table with `htap tables remove` (not built yet)");
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw new UnsupportedOperationException("HTAP tables follow their source; rename the table in the source");
  }
}
