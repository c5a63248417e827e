-- inner join, duplicate names
SELECT "t0"."id" AS "c0", "t0"."name" AS "c1", "t1"."id" AS "c2", "t1"."name" AS "c3" FROM (SELECT "id", "name" FROM "s"."a") AS t0 INNER JOIN (SELECT "id", "name", "a_id" FROM "s"."b") AS t1 ON ("t0"."id" = "t1"."a_id")

-- left join with a filter on the right table
SELECT "t0"."id" AS "c0", "t1"."v" AS "c1" FROM (SELECT "id", "k" FROM "s"."a") AS t0 LEFT JOIN (SELECT "a_id", "v" FROM "s"."b" WHERE "v" > 10) AS t1 ON ("t0"."id" = "t1"."a_id")

-- right join
SELECT "t0"."id" AS "c0", "t1"."id" AS "c1" FROM (SELECT "id" FROM "s"."a") AS t0 RIGHT JOIN (SELECT "id", "a_id" FROM "s"."b") AS t1 ON ("t0"."id" = "t1"."a_id")

-- null-safe join
SELECT "t0"."id" AS "c0", "t1"."id" AS "c1" FROM (SELECT "id", "k" FROM "s"."a") AS t0 INNER JOIN (SELECT "id", "a_id" FROM "s"."b") AS t1 ON ("t0"."k" IS NOT DISTINCT FROM "t1"."a_id")

-- three tables, complete aggregate, top-N
SELECT "t0"."k" AS "group0", SUM(CAST(((CAST("t1"."v" AS BIGINT)) * (CAST("t2"."w" AS BIGINT))) AS BIGINT)) AS "agg0", COUNT(*) AS "agg1", COUNT(DISTINCT "t1"."id") AS "agg2" FROM (SELECT "id", "k" FROM "s"."a") AS t0 INNER JOIN (SELECT "id", "a_id", "v" FROM "s"."b") AS t1 ON ("t0"."id" = "t1"."a_id") INNER JOIN (SELECT "b_id", "w" FROM "s"."c") AS t2 ON ("t2"."b_id" = "t1"."id") GROUP BY "t0"."k" ORDER BY "agg0" DESC, "group0" ASC NULLS FIRST LIMIT 2

-- top-N of joined rows, split by a table
SELECT "t1"."id" AS "c0", "t0"."name" AS "c1" FROM (SELECT "id", "name" FROM "s"."a") AS t0 INNER JOIN (SELECT "id", "name", "a_id" FROM "s"."b") AS t1 ON ("t0"."id" = "t1"."a_id") ORDER BY "t0"."name" ASC, "t1"."id" DESC NULLS FIRST LIMIT 3

