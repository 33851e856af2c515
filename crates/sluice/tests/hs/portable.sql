-- Tables for the portable HandlerSocket conformance test (hs_portable.rs), MariaDB form.
-- portable_pg.sql creates the same tables and rows on PostgreSQL. `$DB` is replaced by the
-- database name (hsref, served by the reference plugin).
--
-- Everything here renders and compares the same on both servers: VARCHARs compare
-- byte-wise (utf8mb4_nopad_bin here, COLLATE "C" there: no PAD SPACE, so a value followed
-- by a low control byte sorts after the value on both), no trailing spaces, no NUL bytes,
-- valid UTF-8 only; INT and DECIMAL(10,2) only. Index order (which decides ordinals):
-- PRIMARY, ucode (unique), then kgrp, kcat, kname as created.
SET NAMES utf8mb4;
USE $DB;

CREATE TABLE t (
  id    INT NOT NULL AUTO_INCREMENT,
  code  VARCHAR(16) NULL,
  name  VARCHAR(24) NOT NULL DEFAULT '',
  grp   INT NULL,
  cat   INT NOT NULL DEFAULT 0,
  sub   VARCHAR(8) NOT NULL DEFAULT '',
  qty   INT NOT NULL DEFAULT 7,
  n     INT NULL,
  e     INT NULL DEFAULT 42,
  note  VARCHAR(40) NULL,
  price DECIMAL(10,2) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY ucode (code),
  KEY kgrp (grp),
  KEY kcat (cat, sub),
  KEY kname (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

INSERT INTO t (id, code, name, grp, cat, sub, qty, n, e, note, price) VALUES
 (1, 'A1', 'ann', 10, 1, 'a', 5, 1, NULL, 'first', 1.50),
 (2, 'B2', 'bob', 10, 1, 'b', 0, 0, 7, '', 0.00),
 (3, NULL, 'carol', 20, 1, 'c', -3, NULL, NULL, NULL, NULL),
 (4, 'D4', 'dave', NULL, 2, 'a', 1, -4, 1, 'dave''s', -12.34),
 (5, 'E5', '', 20, 2, 'b', 100, 5, 2, 'empty name', 99999999.99),
 (6, 'e6', 'Eve', 30, 2, 'b', -1, 6, 3, 'same cat/sub', 10.50),
 (7, 'L7', CONCAT('lo', CHAR(1), 'w'), 30, 2, 'c', 2147483647, 7, 4, CONCAT('x', CHAR(2), 'y'), 10.51),
 (8, 'T8', CONCAT('tab', CHAR(9), 'lf', CHAR(10), 'cr', CHAR(13)), NULL, 3, 'a', -2147483648, NULL, 5, NULL, 7.00),
 (9, 'X9', X'0102030405060708090a0b0c0d0e0f', 40, 3, 'b', 9, 9, NULL, X'0f0e0d', 0.01),
 (10, 'C10', 'café', 40, 3, 'b', 10, 10, 10, 'accent', 11.11),
 (11, 'C11', 'cafe', 40, 3, 'c', 11, NULL, 11, 'no accent', 11.00),
 (12, 'A12', 'ANN', 50, 3, 'c', 12, 12, 12, 'upper', 12.00),
 (14, 'LONG', 'abcdefghijklmnopqrstuvwx', 50, 4, 'a', 14, 14, 14, 'name of 24 chars', 14.00),
 (15, '', 'frank', 60, 4, 'b', 15, 15, 15, 'empty code', 15.00),
 (16, NULL, 'grace', 60, 4, 'b', 16, NULL, NULL, NULL, NULL),
 (17, 'H17', 'ann', 60, 4, 'c', 17, 17, 17, 'dup name', 17.00),
 (18, 'I18', 'ivan', 70, 5, '', 18, 18, 18, 'empty sub', 18.00),
 (19, 'J19', '日本語', 70, 5, 'a', 19, 19, 19, 'cjk', 19.00),
 (20, 'M20', 'naïve', NULL, 5, 'b', 20, 20, 20, 'm', 20.00),
 (21, 'W21', 'w21', 100, 6, 'a', 21, 21, 21, 'write', 21.00),
 (22, 'W22', 'w22', 100, 6, 'b', 22, 22, 22, 'write', 22.00),
 (23, 'W23', 'w23', 100, 6, 'c', 23, 23, 23, NULL, 23.00),
 (24, 'W24', 'w24', 110, 6, 'd', 24, 24, 24, NULL, 24.00),
 (25, 'W25', 'ann', 110, 7, 'a', 25, NULL, 25, NULL, 25.00),
 (26, 'W26', 'w26', 110, 7, 'b', 0, 0, 26, NULL, 26.00),
 (27, 'W27', 'w27', 120, 7, 'c', -5, -5, 27, 'x', 27.00),
 (28, 'W28', 'w28', 120, 7, 'd', 5, 5, 28, NULL, 28.00),
 (29, 'W29', 'w29', NULL, 8, 'a', 29, NULL, NULL, NULL, 29.00),
 (30, 'W30', 'w30', 130, 8, 'b', 30, 30, 30, 'last', 30.00);

-- No auto-increment: inserts answer `0\t1`.
CREATE TABLE t2 (
  k INT NOT NULL,
  v VARCHAR(16) NULL,
  n INT NOT NULL DEFAULT 0,
  PRIMARY KEY (k),
  KEY kv (v),
  KEY kn (n)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

INSERT INTO t2 (k, v, n) VALUES
 (1, 'one', 1),
 (2, 'two', 2),
 (3, 'three', 3),
 (5, 'five', 5),
 (8, 'eight', 8),
 (13, 'thirteen', 1),
 (21, NULL, 2),
 (34, '', 3),
 (55, 'One', 5),
 (89, 'two', 8),
 (144, 'w144', 13),
 (233, 'w233', 0),
 (377, 'w377', 10),
 (610, 'w610', -10),
 (987, 'w987', 0);
