-- every column
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders"

-- projection
SELECT "n", "s" FROM "public"."orders"

-- comparisons
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE ((("id" = 1 AND "n" > -2) AND "n" >= 0) AND "id" < 9223372036854775807) AND "id" <= 10

-- null-safe equality
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "n" IS NOT DISTINCT FROM NULL

-- null literal compares to unknown
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "n" = NULL

-- in with null
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "n" IN (1, NULL, 3)

-- is null and is not null
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "s" IS NULL AND NOT "d" IS NULL

-- starts_with escapes % and _
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "s" LIKE '50\%\_off%' ESCAPE '\'

-- ends_with escapes backslash
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "s" LIKE '%C:\\dir\\' ESCAPE '\'

-- contains escapes quote
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE "s" LIKE '%it''s%' ESCAPE '\'

-- doubles
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE (((("d" = CAST('nan' AS DOUBLE PRECISION) AND "d" < CAST('-inf' AS DOUBLE PRECISION)) AND "d" <= CAST('inf' AS DOUBLE PRECISION)) AND "d" > CAST(0.1 AS DOUBLE PRECISION)) AND "d" >= CAST(-0.0 AS DOUBLE PRECISION)) AND "d" = CAST(1e-300 AS DOUBLE PRECISION)

-- timestamp, timestamp_ntz, date
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE ((("ts" >= CAST('2023-11-14 22:13:20.123456+00:00' AS TIMESTAMPTZ) AND "ts" < CAST('1969-12-31 23:59:59.999999+00:00' AS TIMESTAMPTZ)) AND "tsn" = CAST('2024-02-29 23:59:59.999999' AS TIMESTAMP)) AND "tsn" = CAST('2024-01-01 00:00' AS TIMESTAMP)) AND "day" = CAST('1969-12-31' AS DATE)

-- decimal and boolean
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE ("dec" = -0.01 AND "dec" > 12345678901234567890.123456789) AND "b" = FALSE

-- not, and, or nesting
SELECT "id", "s", "d", "ts", "tsn", "day", "dec", "b", "n" FROM "public"."orders" WHERE NOT ((("n" = 1) AND (NOT ("b" IS NULL))) OR ("s" IN ('x', 'y')))

-- quoted identifiers
SELECT "we""ird", "select", "MixedCase" FROM "public"."orders" WHERE "we""ird" = 'v'

-- aggregates with group by
SELECT "b", "day", COUNT(*) AS "agg0", COUNT("s") AS "agg1", SUM("n") AS "agg2", MIN("ts") AS "agg3", MAX("d") AS "agg4" FROM "public"."orders" WHERE "n" > 0 GROUP BY "b", "day"

-- aggregates without group by
SELECT COUNT(*) AS "agg0", SUM("dec") AS "agg1" FROM "public"."orders"

-- group by without aggregates
SELECT "b" FROM "public"."orders" GROUP BY "b"

-- sum of decimal arithmetic, grouped by an expression
SELECT "b", CAST((EXTRACT(YEAR FROM "day")) AS INT) AS "group1", SUM(CAST(((CAST(("dec") AS DECIMAL(38, 2))) * (CAST((CAST(((CAST(1 AS DECIMAL(1, 0))) - ("dec")) AS DECIMAL(11, 2))) AS DECIMAL(38, 2)))) AS DECIMAL(22, 4))) AS "agg0", COUNT(CASE WHEN "s" LIKE 'a\%%' ESCAPE '\' THEN CAST((CAST(1 AS INT)) AS INT) ELSE CAST((CAST(NULL AS INT)) AS INT) END) AS "agg1", MAX(COALESCE("n", CAST(-1 AS BIGINT))) AS "agg2", MIN(SUBSTRING("s" FROM CAST(2 AS INT) FOR CAST(1 AS INT))) AS "agg3" FROM "public"."orders" WHERE (("day" >= CAST(CAST('2024-01-01' AS DATE) AS DATE)) AND ("dec" < CAST(24 AS DECIMAL(2, 0)))) GROUP BY "b", CAST((EXTRACT(YEAR FROM "day")) AS INT)

-- top-N over a complete aggregate
SELECT "b", CAST((EXTRACT(YEAR FROM "day")) AS INT) AS "group1", COUNT(DISTINCT "s") AS "agg0", SUM("n") AS "agg1" FROM "public"."orders" GROUP BY "b", CAST((EXTRACT(YEAR FROM "day")) AS INT) ORDER BY "agg0" DESC NULLS LAST, "b" ASC NULLS FIRST, "group1" ASC LIMIT 3

-- complete AVG of decimals, top-N by it
SELECT "b", CAST((CAST(CASE WHEN (CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128) < CAST(0 AS INT128)) <> (CAST((COUNT("dec")) AS INT128) < CAST(0 AS INT128)) THEN -((DIV(ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)), NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)))) * CAST(10000 AS INT128) + (DIV(((ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)), NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END) ELSE (DIV(ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)), NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)))) * CAST(10000 AS INT128) + (DIV(((ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)), NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((SUM("dec")) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((COUNT("dec")) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END END AS DECIMAL(38, 0)) * CAST('0.000001' AS DECIMAL(6, 6))) AS DECIMAL(19, 6)) AS "agg0", CAST((CAST(CASE WHEN (CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128) < CAST(0 AS INT128)) <> (CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128) < CAST(0 AS INT128)) THEN -((DIV(ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)), NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)))) * CAST(10000 AS INT128) + (DIV(((ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)), NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END) ELSE (DIV(ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)), NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)))) * CAST(10000 AS INT128) + (DIV(((ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)), NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((SUM(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((COUNT(CAST((("dec") - (CAST(1 AS DECIMAL(1, 0)))) AS DECIMAL(16, 2)))) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END END AS DECIMAL(38, 0)) * CAST('0.000001' AS DECIMAL(6, 6))) AS DECIMAL(20, 6)) AS "agg1" FROM "public"."orders" GROUP BY "b" ORDER BY "agg0" DESC NULLS LAST LIMIT 2

-- top-N of rows
SELECT "id", "s" FROM "public"."orders" ORDER BY "s" ASC NULLS FIRST, CAST((-("n")) AS BIGINT) DESC NULLS LAST LIMIT 5

-- limit
SELECT "id" FROM "public"."orders" LIMIT 2

-- typed predicates
SELECT "id" FROM "public"."orders" WHERE (((("n" IN (CAST(1 AS BIGINT), CAST(3 AS BIGINT))) OR (NOT ("b" IS NULL))) AND ("dec" IS NOT DISTINCT FROM CAST(NULL AS DECIMAL(10, 2)))) AND (CAST("n" AS DECIMAL(22, 2)) < CAST(4.5 AS DECIMAL(2, 1)))) AND (CAST((-("n")) AS BIGINT) > CAST(-5 AS BIGINT))

