-- semi join (IN)
SELECT "c1", "c2" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE (EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE ("q1"."k" = "q2"."k")))) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- null-aware anti join (NOT IN)
SELECT "c1", "c2" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE (NOT EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE (("q1"."k" = "q2"."k") OR (("q1"."k" = "q2"."k") IS NULL))))) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- anti join (NOT EXISTS)
SELECT "c1", "c2" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE (NOT EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE ("q1"."k" = "q2"."k")))) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- NOT IN below an inner join: one flat SELECT
SELECT "c1", "c2", "c5" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q3"."id" AS "c5" FROM (SELECT "id", "k" FROM "s"."a") AS q1 INNER JOIN (SELECT "id" FROM "s"."a") AS q3 ON ("q1"."id" = "q3"."id") WHERE (NOT EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE (("q1"."k" = "q2"."k") OR (("q1"."k" = "q2"."k") IS NULL)))) AND ("q3"."id" > CAST(2 AS BIGINT))) AS q4 ORDER BY "c1" ASC NULLS FIRST

-- NOT IN over a filtered side
SELECT "c1", "c2" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE (NOT EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE ("q2"."k" IS NOT NULL) AND (("q1"."k" = "q2"."k") OR (("q1"."k" = "q2"."k") IS NULL))))) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- aggregate between joins, scalar subquery
SELECT "c1", "c5", "c6" FROM (SELECT "q1"."c1" AS "c1", "q1"."c5" AS "c5", "q1"."c6" AS "c6" FROM (SELECT "c1" AS "c1", COUNT(*) AS "c5", CAST(SUM("c4") AS BIGINT) AS "c6" FROM (SELECT "q2"."id" AS "c1", "q2"."k" AS "c2", "q3"."k" AS "c3", "q3"."w" AS "c4" FROM (SELECT "id", "k" FROM "s"."a") AS q2 INNER JOIN (SELECT "k", "w" FROM "s"."b") AS q3 ON ("q2"."k" = "q3"."k")) AS q4 GROUP BY "c1") AS q1 WHERE ("q1"."c6" > (SELECT MIN("c7") AS "c8" FROM (SELECT "q5"."w" AS "c7" FROM (SELECT "w" FROM "s"."b") AS q5) AS q6))) AS q7 ORDER BY "c1" ASC NULLS FIRST

-- count(*) over a join: a node with no column
SELECT COUNT(*) AS "c9" FROM (SELECT 1 AS "__row" FROM (SELECT "id", "k" FROM "s"."a") AS q1 INNER JOIN (SELECT "k", "w" FROM "s"."b") AS q2 ON ("q1"."k" = "q2"."k")) AS q3

-- AVG of decimals: exact division, HALF_UP
SELECT "c2" AS "c2", CAST((CAST(CASE WHEN (CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128) < CAST(0 AS INT128)) <> (CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128) < CAST(0 AS INT128)) THEN -((ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) // NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128) + (((ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) // NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END) ELSE (ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) // NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128) + (((ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) // NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) + CASE WHEN CAST(2 AS INT128) * (((ABS(CAST(REPLACE(CAST(CAST((CAST(SUM("c4") AS DECIMAL(25, 2))) AS DECIMAL(38, 2)) AS TEXT), '.', '') AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) * CAST(10000 AS INT128)) % NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128))) >= NULLIF(ABS(CAST((CAST(COUNT("c4") AS DECIMAL(20, 0))) AS INT128)), CAST(0 AS INT128)) THEN CAST(1 AS INT128) ELSE CAST(0 AS INT128) END END AS DECIMAL(38, 0)) * CAST('0.000001' AS DECIMAL(6, 6))) AS DECIMAL(19, 6)) AS "c5" FROM (SELECT "q1"."k" AS "c2", "q1"."v" AS "c4" FROM (SELECT "k", "v" FROM "s"."d") AS q1) AS q2 GROUP BY "c2"

-- left join, top-N
SELECT "c1", "c2", "c3", "c4" FROM (SELECT "q1"."c1", "q1"."c2", "q2"."c3", "q2"."c4" FROM (SELECT "q3"."id" AS "c1", "q3"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q3) AS q1 LEFT JOIN (SELECT "q4"."k" AS "c3", "q4"."w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b") AS q4) AS q2 ON ("q1"."c2" = "q2"."c3")) AS q5 ORDER BY "c4" DESC, "c1" ASC NULLS FIRST LIMIT 3

-- full outer join
SELECT "q1"."c1", "q1"."c2", "q2"."c3", "q2"."c4" FROM (SELECT "q3"."id" AS "c1", "q3"."k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a") AS q3) AS q1 FULL JOIN (SELECT "q4"."k" AS "c3", "q4"."w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b") AS q4) AS q2 ON ("q1"."c2" = "q2"."c3")

-- existence join (IN under OR)
SELECT "c1", "c2", "c9" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", (EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE ("q1"."k" = "q2"."k"))) AS "c9" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE (((EXISTS(SELECT 1 FROM (SELECT "k", "w" FROM "s"."b") AS q2 WHERE ("q1"."k" = "q2"."k")))) OR ("q1"."id" > CAST(4 AS BIGINT)))) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- window functions
SELECT "c1", "c2", "c3", "c4", "c5", "c6", "c7" FROM (SELECT "c1", "c2", "c3", CAST(ROW_NUMBER() OVER (PARTITION BY "c2" ORDER BY "c1" ASC NULLS FIRST) AS INT) AS "c4", CAST(MIN("c3") OVER (PARTITION BY "c2" ORDER BY "c1" ASC NULLS FIRST ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS BIGINT) AS "c5", CAST(LAG("c3", 1, CAST(0 AS BIGINT)) OVER (ORDER BY "c1" ASC NULLS FIRST) AS BIGINT) AS "c6", CAST(RANK() OVER (ORDER BY "c2" ASC) AS INT) AS "c7" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q1"."v" AS "c3" FROM (SELECT "id", "k", "v" FROM "s"."a") AS q1) AS q2) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- a windowed SUM over a frame
SELECT "c1", "c2", "c3", "c4", "c5" FROM (SELECT "c1", "c2", "c3", CAST(SUM("c3") OVER (PARTITION BY "c2" ORDER BY "c1" ASC NULLS FIRST ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS BIGINT) AS "c4", CAST(COUNT(*) OVER (ORDER BY "c1" ASC NULLS FIRST RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS "c5" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q1"."v" AS "c3" FROM (SELECT "id", "k", "v" FROM "s"."a") AS q1) AS q2) AS q3 ORDER BY "c1" ASC NULLS FIRST

-- union all
SELECT "c1", "c2" FROM (SELECT "c1", "c2" FROM (SELECT "c5" AS "c1", "c6" AS "c2" FROM (SELECT "q1"."id" AS "c5", "q1"."k" AS "c6" FROM (SELECT "id", "k" FROM "s"."a") AS q1 WHERE ("q1"."id" < CAST(3 AS BIGINT))) AS q2 UNION ALL SELECT "c3" AS "c1", "c4" AS "c2" FROM (SELECT "q3"."id" AS "c3", "q3"."k" AS "c4" FROM (SELECT "id", "k" FROM "s"."b") AS q3) AS q4) AS q5) AS q6 ORDER BY "c1" ASC NULLS FIRST

-- rollup (expand), grouping sets
SELECT "c7", "c8", "c9" FROM (SELECT "c7" AS "c7", "c8" AS "c8", CAST(SUM("c3") AS BIGINT) AS "c9" FROM (SELECT "c7", "c8", "c3" FROM (SELECT "c2" AS "c7", CAST(0 AS BIGINT) AS "c8", "c3" AS "c3" FROM (SELECT "q1"."k" AS "c2", "q1"."v" AS "c3" FROM (SELECT "k", "v" FROM "s"."a") AS q1) AS q2 UNION ALL SELECT CAST(NULL AS BIGINT) AS "c7", CAST(1 AS BIGINT) AS "c8", "c3" AS "c3" FROM (SELECT "q1"."k" AS "c2", "q1"."v" AS "c3" FROM (SELECT "k", "v" FROM "s"."a") AS q1) AS q2) AS q3) AS q4 GROUP BY "c7", "c8") AS q5 ORDER BY "c8" ASC NULLS FIRST, "c7" ASC NULLS FIRST

-- a self join, top-N with an offset
SELECT "c1", "c2", "c5", "c6" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q2"."id" AS "c5", "q2"."k" AS "c6" FROM (SELECT "id", "k" FROM "s"."a") AS q1 INNER JOIN (SELECT "id", "k" FROM "s"."a" WHERE ("id" > CAST(1 AS BIGINT))) AS q2 ON ("q1"."k" = "q2"."k")) AS q3 ORDER BY "c1" ASC NULLS FIRST, "c5" ASC NULLS FIRST LIMIT 2 OFFSET 1

-- aggregate joined on its grouping column: its input reduced by EXISTS
SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q2"."c3" AS "c3", "q2"."c6" AS "c6" FROM (SELECT "id", "k" FROM "s"."a") AS q1 INNER JOIN (SELECT "c3" AS "c3", CAST(SUM("c4") AS BIGINT) AS "c6" FROM (SELECT "q3"."k" AS "c3", "q3"."w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b") AS q3 WHERE (EXISTS(SELECT 1 FROM (SELECT "id", "k" FROM "s"."a") AS q4 WHERE ("q3"."k" = "q4"."k")))) AS q5 GROUP BY "c3") AS q2 ON ("q1"."k" = "q2"."c3") WHERE ("q2"."c6" IS NOT NULL)

-- aggregate joined on its grouping column below another join: EXISTS over one side
SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q2"."k" AS "c7", "q2"."v" AS "c8", "q3"."c3" AS "c3", "q3"."c6" AS "c6" FROM (SELECT "id", "k" FROM "s"."a") AS q1 INNER JOIN (SELECT "k", "v" FROM "s"."d") AS q2 ON ("q1"."k" = "q2"."k") INNER JOIN (SELECT "c3" AS "c3", CAST(SUM("c4") AS BIGINT) AS "c6" FROM (SELECT "q4"."k" AS "c3", "q4"."w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b") AS q4 WHERE (EXISTS(SELECT 1 FROM (SELECT "id", "k" FROM "s"."a") AS q5 WHERE ("q4"."k" = "q5"."k")))) AS q6 GROUP BY "c3") AS q3 ON (("q1"."k" = "q3"."c3") AND ("q1"."id" < "q3"."c6")) WHERE ("q3"."c6" IS NOT NULL)

