"""The shim's one translator (io.sparkhtap.PlanTranslator, ExprTranslator and HtapScanBuilder) on its
own: Spark SQL text in, the pushed plans of the query's HTAP scans out (htap.rewrite.pushed),
compared with tests/golden/translator.txt. Driven through a real SparkSession over tables of a
private Postgres, as a user's query is. Column names the translator takes from Spark's
expression ids (`c123`) are numbered in order of appearance, so the golden text does not depend
on how many expressions the session made before. `HTAP_UPDATE_GOLDEN=1` rewrites the file (read
the diff: it is the review of a translator change)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden" / "translator.txt"

CASES = {
    "filters of every kind": "SELECT id FROM {a} WHERE k = 3 AND name LIKE 'n1%' AND v > 2.5 AND name IS NOT NULL"
                             " AND id IN (1, 2, 3) AND NOT (k <=> 4)",
    "a partial aggregate per partition": "SELECT k, count(*), sum(v), min(name) FROM {a} GROUP BY k",
    "top-N of rows": "SELECT id, name FROM {a} ORDER BY v DESC NULLS LAST, id LIMIT 5",
    "a join Spark pushes through DSv2": "SELECT a.id, b.w FROM {a} a JOIN {b} b ON a.k = b.k WHERE b.w > 1",
    "semi and anti joins": "SELECT id FROM {a} a WHERE k IN (SELECT k FROM {b}) AND NOT EXISTS"
                           " (SELECT 1 FROM {b} b WHERE b.id = a.id AND b.w = 2)",
    "EXISTS under OR: an existence join": "SELECT id FROM {a} a WHERE EXISTS (SELECT 1 FROM {b} b WHERE b.k = a.k)"
                                         " OR a.v > 20",
    "an aggregate between joins, a scalar subquery": "SELECT a.k, x.n FROM {a} a JOIN (SELECT k, count(*) AS n FROM {b}"
                                                    " GROUP BY k) x ON a.k = x.k WHERE a.v > (SELECT avg(v) FROM {a})",
    "window functions": "SELECT id, row_number() OVER (PARTITION BY k ORDER BY id) AS r, sum(v) OVER (PARTITION BY k"
                        " ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM {a} a"
                        " WHERE k IN (SELECT k FROM {b})",
    "UNION ALL and a distinct UNION": "SELECT k FROM {a} UNION SELECT w FROM {b} UNION ALL SELECT k FROM {b}",
    "ROLLUP": "SELECT a.k, b.w, count(*) FROM {a} a JOIN {b} b ON a.id = b.id GROUP BY ROLLUP(a.k, b.w)",
    "ORDER BY, LIMIT and OFFSET over a join": "SELECT a.id, b.w FROM {a} a JOIN {b} b ON a.id = b.id"
                                              " ORDER BY a.id LIMIT 4 OFFSET 2",
}


@pytest.fixture
def tables(workspace):
    ws = workspace
    s = ws.schema
    ws.sql(f"CREATE TABLE {s}.a (id int PRIMARY KEY, k int, v numeric(12,2), name text)")
    ws.sql(f"INSERT INTO {s}.a SELECT g, g % 5, g * 1.5, 'n' || g FROM generate_series(1, 30) g")
    ws.sql(f"CREATE TABLE {s}.b (id int PRIMARY KEY, k int, w int)")
    ws.sql(f"INSERT INTO {s}.b SELECT g, g % 4, g % 3 FROM generate_series(1, 20) g")
    for t in ("a", "b"):
        ws.htap("tables", "add", f"{s}.{t}")
    ws.start_service()
    for t in ("a", "b"):
        ws.wait_readable(t)
    return s


def pushed_text(explain: str, schema: str) -> str:
    """The pushed plans of an EXPLAIN, one JSON line each, expression-id names numbered in order."""
    decoder, plans, at = json.JSONDecoder(), [], 0
    while (at := explain.find("pushed=", at)) >= 0:
        raw, at = decoder.raw_decode(explain, at + len("pushed="))
        plans.append(json.dumps(raw, separators=(",", ":"), sort_keys=True))
    text = "\n".join(plans).replace(schema + ".", "<schema>.")
    numbers: dict[str, str] = {}
    return re.sub(r'"c(\d+)"', lambda m: '"c%d"' % int(numbers.setdefault(m.group(1), str(len(numbers) + 1))), text)


def read_golden() -> dict[str, str]:
    if not GOLDEN.exists():
        return {}
    out, case = {}, None
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("-- "):
            case = line[3:]
            out[case] = []
        elif case is not None and line:
            out[case].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def test_sql_to_pushed_plans_golden(spark, catalog, tables):
    names = {t: f"{catalog}.{tables}.{t}" for t in ("a", "b")}
    actual = {}
    for case, text in CASES.items():
        explain = spark.sql("EXPLAIN " + text.format(**names)).collect()[0][0]
        actual[case] = pushed_text(explain, tables)
        assert actual[case], f"{case}: no HTAP scan in\n{explain}"
    if os.environ.get("HTAP_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text("".join(f"-- {case}\n{text}\n\n" for case, text in actual.items()))
        return
    expected = read_golden()
    assert sorted(actual) == sorted(expected), f"cases differ from {GOLDEN} (HTAP_UPDATE_GOLDEN=1 rewrites it)"
    for case, text in actual.items():
        assert text == expected[case], f"{case}:\n  got:      {text}\n  expected: {expected[case]}"
