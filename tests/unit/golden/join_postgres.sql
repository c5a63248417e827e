-- inner join, duplicate names
SELECT "q1"."id" AS "c1", "q1"."name" AS "c2", "q2"."id" AS "c3", "q2"."name" AS "c4" FROM (SELECT "id", "name" FROM "j"."a") AS q1 INNER JOIN (SELECT "id", "name", "a_id" FROM "j"."b") AS q2 ON ("q1"."id" = "q2"."a_id")

-- left join with a filter on the right table
SELECT "q1"."c1" AS "c1", "q1"."c4" AS "c4" FROM (SELECT "q2"."c1", "q2"."c2", "q3"."c3", "q3"."c4" FROM (SELECT "q4"."id" AS "c1", "q4"."k" AS "c2" FROM (SELECT "id", "k" FROM "j"."a") AS q4) AS q2 LEFT JOIN (SELECT "q5"."a_id" AS "c3", "q5"."v" AS "c4" FROM (SELECT "a_id", "v" FROM "j"."b" WHERE ("v" > CAST(10 AS BIGINT))) AS q5) AS q3 ON ("q2"."c1" = "q3"."c3")) AS q1

-- right join
SELECT "q1"."c1" AS "c1", "q1"."c3" AS "c3" FROM (SELECT "q2"."c1", "q3"."c3", "q3"."c4" FROM (SELECT "q4"."id" AS "c1" FROM (SELECT "id" FROM "j"."a") AS q4) AS q2 RIGHT JOIN (SELECT "q5"."id" AS "c3", "q5"."a_id" AS "c4" FROM (SELECT "id", "a_id" FROM "j"."b") AS q5) AS q3 ON ("q2"."c1" = "q3"."c4")) AS q1

-- null-safe join
SELECT "q1"."id" AS "c1", "q2"."id" AS "c3" FROM (SELECT "id", "k" FROM "j"."a") AS q1 INNER JOIN (SELECT "id", "a_id" FROM "j"."b") AS q2 ON ("q1"."k" IS NOT DISTINCT FROM "q2"."a_id")

-- three tables, complete aggregate, top-N
SELECT "c2", "c10", "c11", "c12" FROM (SELECT "c2" AS "c2", CAST(SUM(CAST(((CAST("c5" AS BIGINT)) * (CAST("c7" AS BIGINT))) AS BIGINT)) AS BIGINT) AS "c10", COUNT(*) AS "c11", COUNT(DISTINCT "c3") AS "c12" FROM (SELECT "q1"."id" AS "c1", "q1"."k" AS "c2", "q2"."id" AS "c3", "q2"."a_id" AS "c4", "q2"."v" AS "c5", "q3"."b_id" AS "c6", "q3"."w" AS "c7" FROM (SELECT "id", "k" FROM "j"."a") AS q1 INNER JOIN (SELECT "id", "a_id", "v" FROM "j"."b") AS q2 ON ("q1"."id" = "q2"."a_id") INNER JOIN (SELECT "b_id", "w" FROM "j"."c") AS q3 ON ("q3"."b_id" = "q2"."id")) AS q4 GROUP BY "c2") AS q5 ORDER BY "c11" DESC NULLS LAST, "c2" ASC NULLS FIRST LIMIT 2

-- top-N of joined rows, split by a table
SELECT "c3", "c2" FROM (SELECT "q2"."id" AS "c3", "q1"."name" AS "c2" FROM (SELECT "id", "name" FROM "j"."a") AS q1 INNER JOIN (SELECT "id", "name", "a_id" FROM "j"."b") AS q2 ON ("q1"."id" = "q2"."a_id")) AS q3 ORDER BY "c2" ASC, "c3" DESC LIMIT 3

