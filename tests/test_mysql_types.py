"""Issue 11 (MariaDB): every legal value has a defined fate, the same through the initial copy
and the binlog: zero dates (and dates with a zero month or day) are NULL; bit(64) and unsigned
integers keep their extremes; float -0.0 stays -0.0; decimal(65,30) is refused at `tables add`
with the way out, and each override (string, double, decimal(p,s)) delivers the same values on
both paths, a value that does not fit failing only its table."""

from __future__ import annotations

import struct

from conftest import normalized, wait_until

DDL = """
CREATE TABLE {t} (
  id int PRIMARY KEY,
  tu tinyint unsigned, su smallint unsigned, mu mediumint unsigned, iu int unsigned, bu bigint unsigned,
  ts_ tinyint, bs bigint, wide bit(64), b1 bit(1), yr year,
  f float, d double,
  dt date, dtm datetime, dtm6 datetime(6), tsp timestamp(6) NULL,
  dec65s decimal(65,30), dec65d decimal(65,30), dec38 decimal(38,10)
) ENGINE=InnoDB"""

COLUMNS = "id, tu, su, mu, iu, bu, ts_, bs, wide, b1, yr, f, d, dt, dtm, dtm6, tsp, dec65s, dec65d, dec38"
ROWS = [
    # extremes of every integer, all bits of bit(64), negative zeros, zero dates, the widest decimals
    "(1, 255, 65535, 16777215, 4294967295, 18446744073709551615, -128, -9223372036854775808,"
    " b'1111111111111111111111111111111111111111111111111111111111111111', b'1', 2155,"
    " -0e0, -0e0, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', '0000-00-00 00:00:00',"
    " '99999999999999999999999999999999999.999999999999999999999999999999',"
    " '-99999999999999999999999999999999999.999999999999999999999999999999', '1234567890123456789012345678.0123456789')",
    "(2, 0, 0, 0, 0, 0, 127, 9223372036854775807, b'0', b'0', 0,"
    " 3.4028234e38, 1.7976931348623157e308, '2020-00-15', '2020-02-00 10:00:00', '1000-01-01 00:00:00.000001',"
    " '1970-01-01 00:00:01',"
    " '0.000000000000000000000000000001', '0.000000000000000000000000000001', '-0.0000000001')",
    "(3, 1, 1, 1, 1, 9223372036854775808, 0, 0, b'1000000000000000000000000000000000000000000000000000000000000000', NULL, 1901,"
    " 1.17549435e-38, 5e-324, '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999',"
    " '12.500000000000000000000000000000', '0.1', '0')",
    "(4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '1000-01-01', NULL, NULL, NULL,"
    " NULL, NULL, NULL)",
]

# What Spark must return, asked of MariaDB: zero dates (or a zero month/day) as NULL, BIT as an
# unsigned number, FLOAT widened exactly, the overridden decimals as their text and as doubles.
EXPECTED = """
SELECT id, tu, su, mu, iu, CAST(bu AS DECIMAL(20,0)), ts_, bs, CAST(CAST(wide AS UNSIGNED) AS DECIMAL(20,0)),
  CAST(b1 AS UNSIGNED), yr, CAST(f AS DOUBLE), d,
  IF(dt IS NULL OR YEAR(dt) = 0 OR MONTH(dt) = 0 OR DAYOFMONTH(dt) = 0, NULL, dt),
  IF(dtm IS NULL OR YEAR(dtm) = 0 OR MONTH(dtm) = 0 OR DAYOFMONTH(dtm) = 0, NULL, dtm),
  IF(dtm6 IS NULL OR YEAR(dtm6) = 0 OR MONTH(dtm6) = 0 OR DAYOFMONTH(dtm6) = 0, NULL, dtm6),
  IF(tsp IS NULL OR UNIX_TIMESTAMP(tsp) = 0, NULL, tsp),
  CAST(dec65s AS CHAR), CAST(dec65d AS DOUBLE), dec38
FROM {t}"""


def exact(rows):
    """Rows with floats as their bits (so -0.0 and 0.0 differ)."""
    return normalized([tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in r) for r in rows])


def test_mariadb_special_values_copied_and_streamed(my_workspace, spark, my_catalog):
    ws = my_workspace
    t, t2 = f"{ws.schema}.special", f"{ws.schema}.special2"
    ws.sql("SET SESSION sql_mode = ''")  # zero dates are legal values in this mode
    ws.sql(DDL.format(t=t))
    ws.sql(f"INSERT INTO {t} ({COLUMNS}) VALUES {', '.join(ROWS)}")

    r = ws.htap("tables", "add", t, check=False)
    assert r.returncode == 2 and "column dec65s" in r.stderr and "38 digits" in r.stderr
    assert "--column-type dec65s=<string" in r.stderr
    ws.htap("tables", "add", t, "--column-type", "dec65s=string", "--column-type", "dec65d=double")
    ws.start_service()
    ws.wait_readable("special")
    spark.conf.set(f"spark.sql.catalog.{my_catalog}.route", "replica")
    schema = {f.name: f.dataType.simpleString() for f in spark.table(f"{my_catalog}.{t}").schema.fields}
    assert schema["dec65s"] == "string" and schema["dec65d"] == "double" and schema["wide"] == "decimal(20,0)"
    want = exact(ws.sql(EXPECTED.format(t=t)))
    assert exact(spark.sql(f"SELECT {COLUMNS} FROM {my_catalog}.{t}").collect()) == want, "initial copy"

    # The same values through the binlog (ids + 10).
    rows = [f"({int(r[1:r.index(',')]) + 10}{r[r.index(','):]}" for r in ROWS]
    ws.sql(f"INSERT INTO {t} ({COLUMNS}) VALUES {', '.join(rows)}")
    ws.sql(f"UPDATE {t} SET d = -0e0, f = -0e0, dt = '0000-00-00', dec65s = '-0.500000000000000000000000000000' WHERE id = 3")
    ws.wait_caught_up("special")
    want = exact(ws.sql(EXPECTED.format(t=t)))
    got = exact(spark.sql(f"SELECT {COLUMNS} FROM {my_catalog}.{t}").collect())
    assert got == want, "binlog"
    by_id = {r[0]: r for r in ws.sql(f"SELECT id, dec65s FROM {t}")}
    assert by_id[11][1] == by_id[1][1]  # the exact text survives (no exponent, no rounding)

    # decimal(p,s) overrides: a value that does not fit fails its table alone, naming it.
    ws.sql(f"CREATE TABLE {t2} (id int PRIMARY KEY, v decimal(65,30)) ENGINE=InnoDB")
    ws.sql(f"INSERT INTO {t2} VALUES (1, 1.5)")
    ws.htap("tables", "add", t2, "--column-type", "v=decimal(38,10)")
    ws.wait_readable("special2")
    ws.sql(f"INSERT INTO {t2} VALUES (2, 0.00000000001)")  # an eleventh decimal: does not fit
    ws.sql(f"INSERT INTO {t} (id) VALUES (99)")
    failed = wait_until(lambda: (x := ws.table("special2")).state == "failed" and x, None, "special2 to fail")
    assert "column v" in failed.error and "0.00000000001" in failed.error and "binlog file #" in failed.error
    ws.wait_caught_up("special")
    assert ws.table("special").state == "streaming"

    # A MySQL source has nothing to drop in the server.
    ws.stop_service()
    out = ws.htap("sources", "drop", ws.source).stdout
    assert "nothing to drop" in out
