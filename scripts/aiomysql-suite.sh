#!/usr/bin/env bash
# Run aiomysql 0.3.2's own test suite (shipped in its PyPI sdist) against a
# MySQL/MariaDB endpoint that offers TLS: a server, or a proxy in front of
# one.
#
#   scripts/aiomysql-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/aiomysql-suite.sh --setup-only
#
# Prints "aiomysql: N passed, N failed, N skipped", and writes the failed test
# ids and the per-test outcomes to a results dir (paths printed). Exits 0 when
# the suite ran, whatever its failures (the caller compares); non-zero only if
# it could not run (setup failure, endpoint unreachable, pytest crashed or
# timed out).
#
# aiomysql is an asyncio driver on PyMySQL's pure-Python protocol code; every
# test runs twice, on asyncio's and on uvloop's event loop. Setup (idempotent,
# cached under target/driver-suites/): the sdist (tests/; its pure-Python
# aiomysql package is what the tests import); a venv (aiomysql-venv) with the
# versions of aiomysql's own requirements-dev.txt: pytest 8.4.2 (with pytest 9
# its async fixtures are errors), PyMySQL 1.1.2 (1.2 changed the escaping API
# it uses), SQLAlchemy 1.3.24 (tests/sa), uvloop 0.22.1.
#
# The suite's fixtures connect as "root" with the password from
# MYSQL_ROOT_PASSWORD, over TLS, checking the server's certificate against
# tests/ssl_resources/ssl/ca.pem and that the session is encrypted (SHOW
# STATUS LIKE 'Ssl_version'). They drop and create the databases test_pymysql
# and test_pymysql2 themselves. So USER must be root and DBNAME test_pymysql,
# and the endpoint must offer TLS with a certificate signed by the CA in
# AIOMYSQL_SUITE_CA_FILE (copied over the suite's ca.pem; by default the
# suite's own CA, whose certificates expire in February 2028). Reference
# result on MariaDB 10.11: 489 passed, 0 failed, 18 skipped, 2 xfailed.
#
# Env: AIOMYSQL_SUITE_CA_FILE (above); AIOMYSQL_SUITE_CACHE, _RESULTS,
# _TIMEOUT (default 600), _TEST_TIMEOUT (default 60), _PYTEST_ARGS; see
# scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init aiomysql 0.3.2

setup() {
    sl_suite_sdist aiomysql tests/conftest.py
    local ca="$SL_SUITE_SRC/tests/ssl_resources/ssl/ca.pem"
    [[ -f "$ca.shipped" ]] || cp "$ca" "$ca.shipped"
    cp "${AIOMYSQL_SUITE_CA_FILE:-$ca.shipped}" "$ca"
    if [[ ! -f "$SL_SUITE_STAMP" ]]; then
        sl_suite_pip pytest==8.4.2 pytest-timeout==2.4.0 PyMySQL==1.1.2 \
            SQLAlchemy==1.3.24 uvloop==0.22.1 "aiomysql==$SL_SUITE_VERSION"
        sl_suite_ready "from importlib.metadata import version; print(version('aiomysql'))"
    fi
}

preflight() {
    [[ "$SL_SUITE_USER" == root && "$SL_SUITE_DBNAME" == test_pymysql ]] ||
        sl_die "aiomysql's fixtures connect as root to test_pymysql (got $SL_SUITE_USER, $SL_SUITE_DBNAME)"
}

suite_env() {
    sl_suite_clear_env 'MYSQL*' 'MARIADB*'
    export MYSQL_ROOT_PASSWORD="$SL_SUITE_PASSWORD"
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    sl_suite_pytest "$SL_SUITE_SRC" "$outcomes" "$log" "$limit" "$test_limit" tests \
        --mysql-address="$SL_SUITE_HOST:$SL_SUITE_PORT" "$@"
}

sl_suite_main root test_pymysql "$@"
