"""Per-scan overhead (issue 12 item 5): the shim pickles each scan's Python data source itself
(io.sparkhtap.PickledDataSource) instead of a round trip to Spark's `create_data_source` worker.
The pickle it writes must unpickle, for any options, into the instance that worker would have
built: our data source with the options in Spark's case-insensitive dict."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict

from htap.pushdown.datasource import HtapDataSource

# Options as Spark hands them (case-insensitive: keys distinct once lowercased), any text.
options_st = st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=200), max_size=12).filter(
    lambda d: len({k.lower() for k in d}) == len(d))


def java_pickle(spark, options: dict[str, str]) -> bytes:
    m = spark._jvm.java.util.HashMap()
    for k, v in options.items():
        m.put(k, v)
    return bytes(spark._jvm.io.sparkhtap.PickledDataSource.pickle(m))


@settings(max_examples=200, deadline=None)
@given(options=options_st)
def test_the_shims_pickle_is_the_data_source_sparks_worker_builds(spark, options):
    made = pickle.loads(java_pickle(spark, options))
    expected = CaseInsensitiveDict()
    for k, v in options.items():
        expected[k] = v
    assert type(made) is HtapDataSource
    assert isinstance(made.options, CaseInsensitiveDict)
    assert dict(made.options) == dict(expected)
    for k, v in options.items():
        assert made.options[k] == v


def test_a_catalog_scan_reads_through_the_shims_data_source(spark, catalog, workspace):
    """Scans planned from the shim's pickle read their table with their own options (columns,
    filters, the route): on the replica and on failover."""
    ws = workspace
    t = f"{ws.schema}.ovh"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 50) g")
    ws.htap("tables", "add", t)
    ws.start_service()
    ws.wait_readable("ovh")
    for route in ("replica", "source"):
        if route == "source":
            ws.htap("failover", t, "on")
        rows = spark.sql(f"SELECT id, v FROM {catalog}.{t} WHERE id IN (3, 7) ORDER BY id").collect()
        assert [tuple(r) for r in rows] == [(3, "v3"), (7, "v7")]
        assert spark.sql(f"SELECT count(*) FROM {catalog}.{t}").collect()[0][0] == 50


def test_reads_planned_in_the_bridge_answer_as_sparks_planning_worker(spark, catalog, workspace):
    """Scans' reads are planned in the driver's bridge process (PickledDataSource, `plan-read`)
    instead of a round trip to Spark's `plan_data_source_read` worker, unless
    spark.htap.bridgePlanning=false: every query answers the same both ways, on the replica and
    on failover, and only the bridge way counts reads planned by the bridge."""
    ws = workspace
    t, u = f"{ws.schema}.ovb_t", f"{ws.schema}.ovb_u"
    ws.sql(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int)")
    ws.sql(f"INSERT INTO {t} SELECT g, 'v' || g, g % 5 FROM generate_series(1, 200) g")
    ws.sql(f"CREATE TABLE {u} (id int PRIMARY KEY, t_id int NOT NULL, w numeric(10, 2))")
    ws.sql(f"INSERT INTO {u} SELECT g, (g % 200) + 1, g / 4.0 FROM generate_series(1, 300) g")
    for table in (t, u):
        ws.htap("tables", "add", table)
    ws.start_service()
    ws.wait_readable("ovb_t")
    ws.wait_readable("ovb_u")
    ct, cu = f"{catalog}.{t}", f"{catalog}.{u}"
    queries = [
        f"SELECT count(*) FROM {ct}",
        f"SELECT id, v FROM {ct} WHERE id IN (3, 7, 199)",
        f"SELECT n, count(*), max(v) FROM {ct} GROUP BY n",
        f"SELECT t.n, sum(u.w) FROM {ct} t JOIN {cu} u ON t.id = u.t_id WHERE t.id < 150 GROUP BY t.n",
        f"SELECT 1 FROM {ct} LIMIT 1",
        f"SELECT id FROM {ct} WHERE id NOT IN (SELECT t_id FROM {cu} WHERE id < 100)",
    ]
    planned = spark._jvm.io.sparkhtap.PickledDataSource.bridgePlannedReads
    try:
        for route in ("replica", "source"):
            if route == "source":
                for table in (t, u):
                    ws.htap("failover", table, "on")
            for q in queries:
                answers = {}
                for bridge in ("true", "false"):
                    spark.conf.set("spark.htap.bridgePlanning", bridge)
                    before = planned()
                    answers[bridge] = sorted(tuple(r) for r in spark.sql(q).collect())
                    assert (planned() > before) == (bridge == "true"), (route, q, bridge)
                assert answers["true"] == answers["false"], (route, q)
                assert answers["true"], (route, q)
    finally:
        spark.conf.unset("spark.htap.bridgePlanning")
