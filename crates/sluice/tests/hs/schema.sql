-- Tables for the HandlerSocket conformance test (hs_conformance.rs). `$DB` is replaced by
-- the database name; the test runs this twice (hsref, served by the plugin, and hssluice,
-- served by Sluice) on the same MariaDB, so both start byte-identical.
SET NAMES utf8mb4;
USE $DB;

-- Main table: auto-increment key, one column of each common type, a unique index, two
-- non-unique indexes and a two-column index. The unique index is declared after two
-- plain ones: MariaDB orders keys PRIMARY, unique, plain (this decides index ordinals).
CREATE TABLE t1 (
  id    INT NOT NULL AUTO_INCREMENT,
  name  VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL DEFAULT '',
  code  VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL,
  grp   INT NULL,
  cat   INT NOT NULL DEFAULT 0,
  sub   VARCHAR(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL DEFAULT '',
  note  TEXT NULL,
  d     DATE NULL,
  dt    DATETIME NULL,
  price DECIMAL(10,2) NULL,
  fl    FLOAT NULL,
  qty   INT NOT NULL DEFAULT 7,
  uq    INT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  KEY kgrp (grp),
  KEY kcat (cat, sub),
  UNIQUE KEY ucode (code),
  KEY kname (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

INSERT INTO t1 (id, name, code, grp, cat, sub, note, d, dt, price, fl, qty, uq) VALUES
 (1, 'alice', 'A1', 10, 1, 'a', 'first row', '2020-01-01', '2020-01-01 10:00:00', 1.50, 1.5, 5, 5),
 (2, 'bob', 'B2', 10, 1, 'b', '', '2020-02-29', '2020-02-29 23:59:59', 0.00, 0, 0, 0),
 (3, 'carol', NULL, 20, 1, 'c', NULL, NULL, NULL, NULL, NULL, -3, 3),
 (4, 'dave', 'D4', NULL, 2, 'a', 'dave''s note', '1999-12-31', '1999-12-31 00:00:01', -12.34, -2.25, 1, 1),
 (5, '', 'E5', 20, 2, 'b', 'empty name', '2021-06-15', '2021-06-15 12:30:00', 99999999.99, 0.1, 100, 100),
 (6, 'Eve', 'e6', 30, 2, 'b', 'same cat/sub as 5', '2021-06-16', '2021-06-16 00:00:00', 10.50, 3.14159, -1, 7),
 (7, CONCAT('lo', CHAR(1), 'w'), 'L7', 30, 2, 'c', CONCAT('x', CHAR(2), 'y'), '2022-01-01', '2022-01-01 01:02:03', 10.51, 1e20, 2147483647, 4294967295),
 (8, CONCAT('nul', CHAR(0), 'x'), 'N8', NULL, 3, 'a', NULL, '2022-03-04', NULL, 7.00, 100, -2147483648, 0),
 (9, CONCAT('tab', CHAR(9), 'lf', CHAR(10), 'cr', CHAR(13)), 'T9', 40, 3, 'a', 'control', '2023-05-05', '2023-05-05 05:05:05', 5.05, -0.5, 9, 9),
 (10, X'000102030405060708090a0b0c0d0e0f', 'X10', 40, 3, 'b', X'0f0e0d', '2023-05-06', '2023-05-06 06:06:06', 0.01, 2.5e-3, 10, 10),
 (11, 'café', 'C11', 40, 3, 'b', 'accent', '2023-07-07', '2023-07-07 07:07:07', 11.11, 11, 11, 11),
 (12, 'alice ', 'A12', 50, 3, 'c', 'trailing space', '2023-08-08', '2023-08-08 08:08:08', 12.00, 12, 12, 12),
 (13, 'ALICE', 'A13', 50, 4, 'a', 'upper case', '2024-01-01', '2024-01-01 00:00:00', 13.13, 13, 0, 0),
 (14, 'abcdefghijklmnopqrstuvwxyz012345', 'LONG', 50, 4, 'a', 'name of 32 chars', '2024-02-02', '2024-02-02 02:02:02', 14.00, 14, 14, 14),
 (15, 'frank', '', 60, 4, 'b', 'empty code', '2024-03-03', '2024-03-03 03:03:03', 15.00, 15, 15, 15),
 (16, 'grace', NULL, 60, 4, 'b', NULL, NULL, NULL, NULL, NULL, 16, 16),
 (17, 'heidi', 'H17', 60, 4, 'c', 'h', '2024-04-04', '2024-04-04 04:04:04', 17.00, 17, 17, 17),
 (18, 'ivan', 'I18', 70, 5, '', 'empty sub', '2024-05-05', '2024-05-05 05:05:05', 18.00, 18, 18, 18),
 (19, 'judy', 'J19', 70, 5, 'a', 'j', '2024-06-06', '2024-06-06 06:06:06', 19.00, 19, 19, 19),
 (20, 'mallory', 'M20', NULL, 5, 'b', 'm', '2024-07-07', '2024-07-07 07:07:07', 20.00, 20, 20, 20),
 (21, 'w21', 'W21', 100, 6, 'a', 'write tests', '2025-01-01', '2025-01-01 00:00:00', 21.00, 21, 21, 21),
 (22, 'w22', 'W22', 100, 6, 'b', 'write tests', '2025-01-02', '2025-01-02 00:00:00', 22.00, 22, 22, 22),
 (23, 'w23', 'W23', 100, 6, 'c', 'write tests', '2025-01-03', '2025-01-03 00:00:00', 23.00, 23, 23, 23),
 (24, 'w24', 'W24', 110, 6, 'd', 'write tests', '2025-01-04', '2025-01-04 00:00:00', 24.00, 24, 24, 24),
 (25, 'w25', 'W25', 110, 7, 'a', NULL, '2025-01-05', '2025-01-05 00:00:00', 25.00, 25, 25, 25),
 (26, 'w26', 'W26', 110, 7, 'b', NULL, '2025-01-06', '2025-01-06 00:00:00', 26.00, 26, 0, 0),
 (27, 'w27', 'W27', 120, 7, 'c', NULL, '2025-01-07', '2025-01-07 00:00:00', 27.00, 27, -5, 2),
 (28, 'w28', 'W28', 120, 7, 'd', NULL, '2025-01-08', '2025-01-08 00:00:00', 28.00, 28, 5, 5),
 (29, 'w29', 'W29', NULL, 8, 'a', NULL, '2025-01-09', '2025-01-09 00:00:00', 29.00, 29, 29, 29),
 (30, 'w30', 'W30', 130, 8, 'b', 'last', '2025-01-10', '2025-01-10 00:00:00', 30.00, 30, 30, 30);

-- Grouping-style lookups: plain INT primary key (no auto-increment), gaps in the keys.
CREATE TABLE t2 (
  k INT NOT NULL,
  v VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL,
  n INT NOT NULL DEFAULT 0,
  b VARBINARY(16) NULL,
  PRIMARY KEY (k),
  KEY kv (v),
  KEY kn (n)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

INSERT INTO t2 (k, v, n, b) VALUES
 (1, 'one', 1, X'01'),
 (2, 'two', 2, X'0200ff'),
 (3, 'three', 3, NULL),
 (5, 'five', 5, ''),
 (8, 'eight', 8, 'eight'),
 (13, 'thirteen', 1, X'0d'),
 (21, NULL, 2, NULL),
 (34, '', 3, ''),
 (55, 'One', 5, 'x'),
 (89, 'two', 8, 'y'),
 (144, CONCAT('z', CHAR(0)), 13, X'00'),
 (233, 'w233', 0, NULL),
 (377, 'w377', 10, NULL),
 (610, 'w610', -10, NULL),
 (987, 'w987', 0, NULL);

-- Defaults and floating point: a literal default on a nullable column, expression
-- defaults (the plugin does not evaluate them), FLOAT and DOUBLE text forms.
CREATE TABLE t3 (
  id INT NOT NULL AUTO_INCREMENT,
  c  VARCHAR(8) NULL,
  e  INT NULL DEFAULT 42,
  f  DOUBLE NULL,
  g  FLOAT NULL,
  ts TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  dt DATETIME NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

INSERT INTO t3 (id, c, e, f, g, ts, dt) VALUES
 (1, 'seed', NULL, 0.1, 0.1, '2020-01-01 00:00:00', '2020-01-01 00:00:00'),
 (2, 'frac', 7, -1234.5678e-10, 1.17549e-38, '2020-01-02 03:04:05', NULL);
