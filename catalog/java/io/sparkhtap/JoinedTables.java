package io.sparkhtap;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.join.JoinType;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The tables of one HTAP scan and how they are joined: a left-deep chain (table 0, then each
 * next table joined onto all before it), each table with its own pushed filter and the columns
 * the join needs. Spark names the joined relation's columns (renaming duplicates); every name is
 * resolved here to its table's column under a name unique in the plan ({@link #unique}), so the
 * pushed plan's join nodes and everything above them refer to plain, distinct names.
 */
final class JoinedTables {
  /** One table of the scan: what was pushed into it before it was joined. */
  static final class Leaf {
    final String name;  // catalog.schema.table
    final String qualified;  // schema.table (the data source's `table` option)
    final StructType schema;
    final List<ObjectNode> filter;  // conjuncts over the table's columns
    final LinkedHashSet<String> columns = new LinkedHashSet<>();
    final long[] stats;  // row versions, bytes of the live deltas, partitions (-1: unknown); null when unknown
    final Map<String, FilterEstimate.Column> columnStats;  // FilterEstimate's

    Leaf(String name, String qualified, StructType schema, List<ObjectNode> filter, long[] stats,
         Map<String, FilterEstimate.Column> columnStats) {
      this.name = name;
      this.qualified = qualified;
      this.schema = schema;
      this.filter = filter;
      this.stats = stats;
      this.columnStats = columnStats;
    }

    /** Bytes read of this table: its deltas' size in proportion to the columns read and to the
     *  rows its filter keeps (as HtapScanBuilder.estimate()). */
    long bytesRead() {
      if (stats == null) return -1;
      double kept = FilterEstimate.selectivity(filter, columnStats, stats[0]);
      double all = 0;
      double read = 0;
      for (StructField f : schema.fields()) {
        all += f.dataType().defaultSize();
        if (columns.contains(f.name())) read += f.dataType().defaultSize();
      }
      double share = all <= 0 ? 1.0 : Math.min(1.0, Math.max(read, 1) / all);
      return Math.max(1, (long) Math.ceil(stats[1] * share * kept));
    }
  }

  /** A column of the joined relation as Spark names it now. */
  static final class Out {
    final String name;
    final int table;
    final String column;
    final DataType type;

    Out(String name, int table, String column, DataType type) {
      this.name = name;
      this.table = table;
      this.column = column;
      this.type = type;
    }
  }

  final List<Leaf> leaves = new ArrayList<>();
  final List<ObjectNode> steps = new ArrayList<>();  // steps[k - 1] joins leaves[k]: {"type", "on"}
  final List<Out> outputs = new ArrayList<>();

  boolean joined() {
    return !steps.isEmpty();
  }

  /** The joined relation's columns as Spark sees them (for translating expressions over it). */
  StructType outputSchema() {
    StructType s = new StructType();
    for (Out o : outputs) s = s.add(o.name, o.type, true);
    return s;
  }

  Out output(String name) {
    for (Out o : outputs) {
      if (o.name.equals(name)) return o;
    }
    return null;
  }

  /** The name of table {@code table}'s column {@code column} in the pushed plan: unique in it. */
  static String unique(int table, String column) {
    return "t" + table + "_" + column;
  }

  /**
   * An expression translated over {@link #outputSchema()} with every column resolved to its
   * table's column's unique name ({@link #unique}). False if a name is unknown.
   */
  boolean resolve(JsonNode node) {
    if (node instanceof ObjectNode) {
      ObjectNode o = (ObjectNode) node;
      if (o.has("col") && o.get("col").isTextual()) {
        Out out = output(o.get("col").asText());
        if (out == null) return false;
        o.put("col", unique(out.table, out.column));
      }
      Iterator<Map.Entry<String, JsonNode>> it = o.fields();
      while (it.hasNext()) {
        Map.Entry<String, JsonNode> e = it.next();
        if (!e.getKey().equals("col") && !resolve(e.getValue())) return false;
      }
    } else if (node instanceof ArrayNode) {
      for (JsonNode child : node) {
        if (!resolve(child)) return false;
      }
    }
    return true;
  }

  static String joinType(JoinType t) {
    switch (t) {
      case INNER_JOIN: return "inner";
      case LEFT_OUTER_JOIN: return "left";
      case RIGHT_OUTER_JOIN: return "right";
      default: return null;
    }
  }

  /** Spark conf: "auto" (default) splits a joined scan only when the cost rule below says the
   *  cluster's task slots beat one task; "true" splits whenever the shape allows it; "false" never. */
  static final String SPLIT_CONF = "spark.htap.splitJoinedScans";

  /**
   * How the scan's work is split: the index of the table whose partitions become the tasks, or
   * -1 for one task; and why, for EXPLAIN. A table may be split when it is the largest and every
   * other table is small enough to read in every task (below Spark's broadcast threshold), and
   * when it is never on the null-supplying side of an outer join (each task would otherwise emit
   * the other side's unmatched rows once per partition).
   *
   * <p>Even then splitting has a price: every task reads the other tables whole again, and the
   * aggregate above the join becomes partial (Spark merges one row per group per task). One task
   * instead runs DuckDB on all the cores of its executor. So the split must buy parallelism the
   * one task does not already have: with C task slots in the cluster, E cores for one task, P
   * partitions, L bytes of the largest table and S of the others, split only when
   * (L + P*S) / min(C, P) < (L + S) / E. On one machine (local mode: C = E) one task always wins;
   * TPC-H SF 1 on 2 cores, Q10: 0.86 s in one task against 2.64 s split by lineitem's 7
   * partitions (one session, alternating). {@link #SPLIT_CONF} overrides the rule.
   */
  Object[] split() {
    if (!joined()) return new Object[] {-1, "one table"};
    String mode = mode(SPLIT_CONF, "auto: split a joined scan by partitions only when the cluster's task slots make it pay");
    if (mode.equals("false")) return new Object[] {-1, "one task (DuckDB on all of the task's threads): " + SPLIT_CONF + "=false"};
    int largest = -1;
    long largestBytes = -1;
    for (int i = 0; i < leaves.size(); i++) {
      long b = leaves.get(i).bytesRead();
      if (b < 0) return new Object[] {-1, "one task: " + leaves.get(i).name + " has no size statistics"};
      if (b > largestBytes) {
        largest = i;
        largestBytes = b;
      }
    }
    long threshold = SQLConf.get().autoBroadcastJoinThreshold();
    long others = 0;
    for (int i = 0; i < leaves.size(); i++) {
      if (i == largest) continue;
      long b = leaves.get(i).bytesRead();
      others += b;
      if (threshold <= 0 || b > threshold) {
        return new Object[] {-1, "one task (DuckDB on all of the task's threads): " + leaves.get(i).name + " reads about "
            + b + " bytes, above spark.sql.autoBroadcastJoinThreshold=" + threshold + ", too large to read in every task"};
      }
    }
    for (int k = 1; k < leaves.size(); k++) {
      String type = steps.get(k - 1).get("type").asText();
      boolean nullSupplying = k == largest ? type.equals("left") : largest < k && type.equals("right");
      if (nullSupplying) {
        return new Object[] {-1, "one task (DuckDB on all of the task's threads): " + leaves.get(largest).name
            + " is on the null-supplying side of an outer join"};
      }
    }
    long parts = leaves.get(largest).stats.length > 2 ? leaves.get(largest).stats[2] : -1;
    if (parts == 1) {
      return new Object[] {-1, "one task (DuckDB on all of the task's threads): the largest table, "
          + leaves.get(largest).name + ", has one partition"};
    }
    String shape = leaves.get(largest).name + " (largest, about " + largestBytes + " bytes); every other table is below"
        + " spark.sql.autoBroadcastJoinThreshold=" + threshold + " and read whole in every task";
    if (mode.equals("true")) return new Object[] {largest, "split by the partitions of " + shape + " (" + SPLIT_CONF + "=true)"};
    StringBuilder costs = new StringBuilder();
    if (splitPays(largestBytes, leaves.get(largest).name, others, parts, costs)) {
      return new Object[] {largest, "split by the partitions of " + shape + "; " + costs};
    }
    return new Object[] {-1, "one task (DuckDB on all of the task's threads): splitting by the partitions of "
        + leaves.get(largest).name + " would read the other tables in every task and buy no parallelism one task lacks; "
        + costs};
  }

  /**
   * The split cost rule ({@link #split}): whether P tasks, each reading one of the largest
   * table's partitions (L bytes in all) and every other table whole (S bytes), beat one task
   * over all of it — (L + P*S) / min(C, P) < (L + S) / E with C task slots and E cores for one
   * task. {@code why} gets the figures, for EXPLAIN. Shared by joined scans and split subtrees.
   */
  static boolean splitPays(long largestBytes, String largestName, long others, long parts, StringBuilder why) {
    int[] cores = cores();
    int slots = cores[0];
    int perTask = cores[1];
    long p = parts > 0 ? parts : 1;
    double split = (largestBytes + (double) p * others) / Math.max(1, Math.min(slots, p));
    double one = (largestBytes + (double) others) / Math.max(1, perTask);
    why.append(String.format(java.util.Locale.ROOT,
        "%d task slots, %d cores for one task, %d partitions: (L + P*S) / min(slots, P) = %.0f against (L + S) / cores = %.0f"
            + " (L = %d bytes of %s, S = %d bytes of the others)",
        slots, perTask, p, split, one, largestBytes, largestName, others));
    return split < one;
  }

  /** Spark conf for a single table's scan with a pushed aggregate, top-N or limit: "auto"
   *  (default) reads it in one task unless the cost rule below says the cluster's task slots beat
   *  one task; "true" always split by partitions (runs of neighbouring partitions, at most twice
   *  the task slots; Spark then merges partial aggregates and sorts again); "false" always one task. */
  static final String TABLE_SPLIT_CONF = "spark.htap.splitTableScans";

  /**
   * How a single table's scan is split when an aggregate, top-N or limit is pushed into it: -1
   * for one task, whose aggregate and top-N are then final (Spark plans no exchange and no final
   * aggregate or sort of its own), or 0 for split by partitions; and why, for EXPLAIN. It is
   * {@link #split}'s cost rule with no other tables (S = 0): with C task slots, E cores for one
   * task and P partitions, split only when min(C, P) > E. On one machine
   * (local mode: C = E) one task always wins: every task of a partitioned scan pays a Python task
   * launch and the query a second stage, while one task runs DuckDB on all the cores.
   * {@code stats} are the table's (row versions, bytes, partitions) from the catalog; without
   * them (system tables) the scan stays split by partitions.
   */
  static Object[] splitTable(long[] stats) {
    String mode = mode(TABLE_SPLIT_CONF,
        "auto: read a table's aggregate, top-N or limit in one task unless the cluster's task slots make splitting pay");
    if (mode.equals("true")) return new Object[] {0, "split by partitions (" + TABLE_SPLIT_CONF + "=true)"};
    if (mode.equals("false")) return new Object[] {-1, "one task (DuckDB on all of the task's threads): " + TABLE_SPLIT_CONF + "=false"};
    long parts = stats != null && stats.length > 2 ? stats[2] : -1;
    if (parts < 0) return new Object[] {0, "one task per partition: the table's partitions are not known"};
    if (parts <= 1) return new Object[] {-1, "one task: the table has one partition"};
    int[] cores = cores();
    String costs = String.format(java.util.Locale.ROOT, "%d partitions, %d task slots, %d cores for one task", parts, cores[0], cores[1]);
    if (Math.min(cores[0], parts) > cores[1]) {
      return new Object[] {0, "split by partitions: " + costs + " (more slots than one task's cores)"};
    }
    return new Object[] {-1, "one task (DuckDB on all of the task's threads): " + costs
        + "; one task per partition would buy no parallelism one task lacks"};
  }

  /** A split conf's value, lower-cased; a {@link Fallbacks.BadSetting} naming the choices if bad. */
  static String mode(String conf, String meaning) {
    String mode = SQLConf.get().getConfString(conf, "auto").trim().toLowerCase(java.util.Locale.ROOT);
    if (!mode.equals("auto") && !mode.equals("true") && !mode.equals("false")) {
      throw new Fallbacks.BadSetting(conf + " must be auto, true or false, not '" + mode + "' (" + meaning + ")");
    }
    return mode;
  }

  /**
   * {task slots of the cluster, cores one task's DuckDB uses}. In local mode both are the local
   * cores. When every executor runs on the driver's machine (Spark's local-cluster, a one-machine
   * cluster), both are that machine's cores at most: a task's DuckDB takes the host's cores
   * shared among the scan's tasks (htap.pushdown.datasource._size_duckdb_threads), so one task
   * already has them all and more tasks add only their overhead (TPC-H SF 10 on
   * local-cluster[2,1] on 2 cores: 64.9 s split against 48.9 s in one task). Otherwise Spark's
   * default parallelism and spark.executor.cores (else this machine's cores, a guess).
   */
  static int[] cores() {
    int machine = Runtime.getRuntime().availableProcessors();
    try {
      org.apache.spark.SparkContext sc = org.apache.spark.sql.SparkSession.active().sparkContext();
      int slots = Math.max(1, sc.defaultParallelism());
      if (sc.isLocal()) return new int[] {slots, slots};
      if (oneMachine(sc)) return new int[] {Math.min(slots, machine), machine};
      int executor = sc.getConf().getInt("spark.executor.cores", machine);
      return new int[] {slots, Math.max(1, Math.min(slots, executor))};
    } catch (RuntimeException e) {
      return new int[] {machine, machine};
    }
  }

  /** Whether every executor runs on the driver's host: local-cluster, or (once executors have
   *  registered) no executor elsewhere. */
  private static boolean oneMachine(org.apache.spark.SparkContext sc) {
    if (sc.master().startsWith("local-cluster")) return true;
    String driver = sc.getConf().get("spark.driver.host", "");
    org.apache.spark.SparkExecutorInfo[] executors = sc.statusTracker().getExecutorInfos();
    if (driver.isEmpty() || executors.length < 2) return false;  // the driver's own entry only: not known yet
    for (org.apache.spark.SparkExecutorInfo e : executors) {
      if (!e.host().equals(driver)) return false;
    }
    return true;
  }

  /** The tables as the plan's scans (from {@code first}, its index of the first table). */
  void scans(ArrayNode into) {
    for (Leaf l : leaves) into.add(Ir.scan(l.qualified, new ArrayList<>(l.columns), l.filter));
  }

  /** The left-deep chain of join nodes over scans {@code first}, {@code first + 1}, .... */
  ObjectNode joinNode(int first) {
    ObjectNode root = null;
    for (int k = 0; k < leaves.size(); k++) {
      List<String> out = new ArrayList<>();
      for (String c : leaves.get(k).columns) out.add(unique(k, c));
      ObjectNode scan = Ir.scanNode(first + k, out);
      if (root == null) {
        root = scan;
        continue;
      }
      ObjectNode join = Ir.MAPPER.createObjectNode();
      join.put("node", "join").put("type", steps.get(k - 1).get("type").asText());
      join.set("left", root);
      join.set("right", scan);
      join.set("on", steps.get(k - 1).get("on"));
      root = join;
    }
    return root;
  }

  String describe() {
    StringBuilder b = new StringBuilder(leaves.get(0).name);
    for (int k = 1; k < leaves.size(); k++) {
      String type = steps.get(k - 1).get("type").asText();
      b.append(type.equals("inner") ? " JOIN " : type.equals("left") ? " LEFT JOIN " : " RIGHT JOIN ").append(leaves.get(k).name);
    }
    return b.toString();
  }
}
