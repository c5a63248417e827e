-- semi join (IN)
SELECT "c1", "c2" FROM (SELECT "q1"."c1", "q1"."c2" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 WHERE EXISTS(SELECT 1 FROM (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 WHERE ("q1"."c2" = "q2"."c3"))) AS q5 ORDER BY "c1" ASC NULLS FIRST

-- null-aware anti join (NOT IN)
SELECT "c1", "c2" FROM (SELECT "q1"."c1", "q1"."c2" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 WHERE NOT EXISTS(SELECT 1 FROM (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 WHERE (("q1"."c2" = "q2"."c3") OR (("q1"."c2" = "q2"."c3") IS NULL)))) AS q5 ORDER BY "c1" ASC NULLS FIRST

-- anti join (NOT EXISTS)
SELECT "c1", "c2" FROM (SELECT "q1"."c1", "q1"."c2" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 WHERE NOT EXISTS(SELECT 1 FROM (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 WHERE ("q1"."c2" = "q2"."c3"))) AS q5 ORDER BY "c1" ASC NULLS FIRST

-- NOT IN over a filtered side
SELECT "c1", "c2" FROM (SELECT "q1"."c1", "q1"."c2" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 WHERE NOT EXISTS(SELECT 1 FROM (SELECT "c3", "c4" FROM (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q5 WHERE (NOT "c3" IS NULL)) AS q2 WHERE (("q1"."c2" = "q2"."c3") OR (("q1"."c2" = "q2"."c3") IS NULL)))) AS q6 ORDER BY "c1" ASC NULLS FIRST

-- aggregate between joins, scalar subquery
SELECT "c1", "c5", "c6" FROM (SELECT "c1", "c5", "c6" FROM (SELECT "c1" AS "c1", COUNT(*) AS "c5", CAST(SUM("c4") AS BIGINT) AS "c6" FROM (SELECT "q1"."c1", "q1"."c2", "q2"."c3", "q2"."c4" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 INNER JOIN (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 ON ("q1"."c2" = "q2"."c3")) AS q5 GROUP BY "c1") AS q6 WHERE ("c6" > (SELECT MIN("c7") AS "c8" FROM (SELECT "w" AS "c7" FROM (SELECT "w" FROM "s"."b" AS "t0") AS q7) AS q8))) AS q9 ORDER BY "c1" ASC NULLS FIRST

-- count(*) over a join: a node with no column
SELECT COUNT(*) AS "c9" FROM (SELECT 1 AS "__row" FROM (SELECT "q1"."c1", "q1"."c2", "q2"."c3", "q2"."c4" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 INNER JOIN (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 ON ("q1"."c2" = "q2"."c3")) AS q5) AS q6

-- left join, top-N
SELECT "c1", "c2", "c3", "c4" FROM (SELECT "q1"."c1", "q1"."c2", "q2"."c3", "q2"."c4" FROM (SELECT "id" AS "c1", "k" AS "c2" FROM (SELECT "id", "k" FROM "s"."a" AS "t0") AS q3) AS q1 LEFT JOIN (SELECT "k" AS "c3", "w" AS "c4" FROM (SELECT "k", "w" FROM "s"."b" AS "t0") AS q4) AS q2 ON ("q1"."c2" = "q2"."c3")) AS q5 ORDER BY "c4" DESC NULLS LAST, "c1" ASC NULLS FIRST LIMIT 3

