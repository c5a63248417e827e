package io.sparkhtap;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark catalog for HTAP tables: {@code spark.sql.catalog.<name> = io.sparkhtap.HtapCatalog}.
 *
 * <p>Glue only. Table schemas come from the Python {@code htap} data source (which reads the
 * replica's metadata store); reads go through {@link HtapScanBuilder}.
 */
public class HtapCatalog implements TableCatalog {
  static final String SHORT_NAME = "htap";
  static final String NO_SUCH_TABLE_MARKER = "HTAP_NO_SUCH_TABLE";
  private static final Set<String> OPTIONS = Set.of("config", "source");

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
                + " (config = path of htap.toml, source = source name in it)");
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
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    throw new UnsupportedOperationException(
        "SHOW TABLES is not built yet in spark-htap; list HTAP tables with `htap tables list`");
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (ident.namespace().length != 1) {
      throw new NoSuchTableException(ident);
    }
    Map<String, String> tableOptions = new HashMap<>(options);
    tableOptions.put("table", ident.namespace()[0] + "." + ident.name());
    PythonDataSourceV2 ds = newDataSource();
    StructType schema;
    try {
      schema = ds.inferSchema(new CaseInsensitiveStringMap(tableOptions));
    } catch (Exception e) {
      if (mentions(e, NO_SUCH_TABLE_MARKER)) {
        throw new NoSuchTableException(ident);
      }
      if (e instanceof RuntimeException) throw (RuntimeException) e;
      throw new IllegalStateException(e.getMessage(), e);
    }
    return new HtapTable(name + "." + ident.namespace()[0] + "." + ident.name(), schema, tableOptions);
  }

  static PythonDataSourceV2 newDataSource() {
    PythonDataSourceV2 ds = new PythonDataSourceV2();
    ds.setShortName(SHORT_NAME);
    return ds;
  }

  private static boolean mentions(Throwable e, String marker) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t.getMessage() != null && t.getMessage().contains(marker)) {
        return true;
      }
    }
    return false;
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw new UnsupportedOperationException("HTAP tables follow their source; alter the table in the source");
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
