-- string order by code point
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`s` > 'M') AND (`s` <= 'v')

-- string equality is case- and padding-sensitive
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`s` = 'ab ')

-- char(n) compares its padded value
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`c` = 'ab  ')

-- like escapes
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE ((`s` LIKE '50\\%\\_off%' ESCAPE '\\') AND (`s` LIKE '%C:\\\\' ESCAPE '\\')) AND (`s` LIKE '%it''s%' ESCAPE '\\')

-- group by and min/max of strings
SELECT `s` AS `s`, MIN(`c`) AS `c7`, COUNT(*) AS `c8` FROM (SELECT `q1`.`s` AS `s`, `q1`.`c` AS `c` FROM (SELECT `s`, `c` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t`) AS q1) AS q2 GROUP BY `s`

-- special doubles
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE ((((((`d` = `d`)) AND ((`d` <> `d`))) AND ((`d` = `d`))) AND (FALSE)) AND (`d` IN (CAST(1.5 AS DOUBLE)))) AND ((`d` <> `d`))

-- finite doubles and -0.0
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`d` = CAST(-0.0 AS DOUBLE)) AND (`d` > CAST(0.1 AS DOUBLE))

-- timestamps keep microseconds and UTC
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`ts` >= CAST('2023-11-14 22:13:20.123456' AS DATETIME(6))) AND (`ts` < CAST('1969-12-31 23:59:59.999999' AS DATETIME(6)))

-- nulls
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (NOT (`id` = CAST(1 AS SIGNED))) AND (`s` <=> NULL)

-- timestamp_ntz keeps microseconds
SELECT `id`, `s`, `c`, `tm`, `d`, `ts`, `tsn`, `b` FROM (SELECT `id` AS `id`, CAST(`s` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `s`, CAST(`c` AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `c`, CAST(CAST(`tm` AS CHAR) AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_nopad_bin AS `tm`, `d` AS `d`, `ts` AS `ts`, `tsn` AS `tsn`, `b` AS `b` FROM `shop`.`t`) AS `t` WHERE (`tsn` = CAST('2024-02-29 23:59:59.999999' AS DATETIME(6)))

