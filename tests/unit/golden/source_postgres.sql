-- string order by code point
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ("s" > 'M') AND ("s" <= 'v')

-- string equality is case- and padding-sensitive
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ("s" = 'ab ')

-- char(n) compares its padded value
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ("c" = 'ab  ')

-- like escapes
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE (("s" LIKE '50\%\_off%' ESCAPE '\') AND ("s" LIKE '%C:\\' ESCAPE '\')) AND ("s" LIKE '%it''s%' ESCAPE '\')

-- group by and min/max of strings
SELECT "s" AS "s", MIN("c") AS "c7", COUNT(*) AS "c8" FROM (SELECT "q1"."s" AS "s", "q1"."c" AS "c" FROM (SELECT "s", "c" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t") AS q1) AS q2 GROUP BY "s"

-- special doubles
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ((((("d" < CAST('nan' AS DOUBLE PRECISION)) AND ("d" >= CAST('inf' AS DOUBLE PRECISION))) AND ("d" > CAST('-inf' AS DOUBLE PRECISION))) AND ("d" IS NOT DISTINCT FROM CAST('nan' AS DOUBLE PRECISION))) AND ("d" IN (CAST('inf' AS DOUBLE PRECISION), CAST(1.5 AS DOUBLE PRECISION)))) AND ("d" IN (CAST('nan' AS DOUBLE PRECISION)))

-- finite doubles and -0.0
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ("d" = CAST(-0.0 AS DOUBLE PRECISION)) AND ("d" > CAST(0.1 AS DOUBLE PRECISION))

-- timestamps keep microseconds and UTC
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE ("ts" >= CAST('2023-11-14 22:13:20.123456+00:00' AS TIMESTAMPTZ)) AND ("ts" < CAST('1969-12-31 23:59:59.999999+00:00' AS TIMESTAMPTZ))

-- nulls
SELECT "id", "s", "c", "u", "d", "ts", "o" FROM (SELECT "id" AS "id", ("s") COLLATE "C" AS "s", (CASE WHEN "c" IS NOT NULL THEN CONCAT("c") END) COLLATE "C" AS "c", "u" AS "u", "d" AS "d", CASE WHEN "ts" = 'infinity' THEN CAST('9999-12-31 23:59:59.999999+00' AS TIMESTAMPTZ) WHEN "ts" = '-infinity' THEN CAST('0001-01-01 00:00:00+00' AS TIMESTAMPTZ) ELSE "ts" END AS "ts", (CASE WHEN "o" IS NOT NULL THEN CONCAT("o") END) COLLATE "C" AS "o" FROM "shop"."t") AS "t" WHERE (NOT ("id" = CAST(1 AS INT))) AND ("s" IS NOT DISTINCT FROM NULL)

