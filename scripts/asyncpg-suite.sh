#!/usr/bin/env bash
# Run asyncpg 0.30.0's own test suite (shipped in its PyPI sdist) against a
# PostgreSQL endpoint: a server, or a proxy in front of one.
#
#   scripts/asyncpg-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/asyncpg-suite.sh --setup-only
#
# Prints "asyncpg: N passed, N failed, N skipped", and writes the failed test
# ids and the per-test outcomes to a results dir (paths printed). Exits 0 when
# the suite ran, whatever its failures (the caller compares); non-zero only if
# it could not run (setup failure, endpoint unreachable, pytest crashed or
# timed out).
#
# Setup (idempotent, cached under target/driver-suites/): the sdist (for its
# tests/, copied to asyncpg-tests/ so that the sdist's uncompiled asyncpg
# package does not shadow the installed one); a venv (asyncpg-venv) with
# pytest, pytest-timeout, distro (imported by tests/test_connect.py) and the
# asyncpg 0.30.0 wheel.
#
# asyncpg's test base uses a running server when PGHOST is set (its
# RunningCluster): PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE come from
# the arguments. DBNAME defaults to "postgres", which some tests name
# outright (pools created with database='postgres'). Before the run, schema
# public of DBNAME is dropped and created again and the databases the tests
# create (testdb, asyncpg_intro_test) are dropped, so that what an
# interrupted run left behind cannot fail this one. The tests that start
# clusters of their own (hot standby, HBA, SSL: initdb, which refuses to run
# as root) skip themselves against a running server, except
# TestConnectionAttributes, deselected here. USER must be a superuser.
# Reference result on PostgreSQL 15 (superuser postgres, scram): 263 passed,
# 0 failed, 46 skipped.
#
# Env: ASYNCPG_SUITE_CACHE, _RESULTS, _TIMEOUT (default 600), _TEST_TIMEOUT
# (default 60), _PYTEST_ARGS; see scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init asyncpg 0.30.0

TESTS="$SL_SUITE_CACHE/asyncpg-tests"

setup() {
    sl_suite_sdist asyncpg tests/test_connect.py
    if [[ ! -f "$TESTS/.asyncpg-$SL_SUITE_VERSION" ]]; then
        rm -rf "$TESTS"
        mkdir -p "$TESTS"
        cp -r "$SL_SUITE_SRC/tests" "$TESTS/"
        touch "$TESTS/.asyncpg-$SL_SUITE_VERSION"
    fi
    if [[ ! -f "$SL_SUITE_STAMP" ]]; then
        sl_suite_pip pytest==9.2.0 pytest-timeout==2.4.0 distro==1.9.0 \
            --only-binary asyncpg "asyncpg==$SL_SUITE_VERSION"
        sl_suite_ready "import asyncpg; print(asyncpg.__version__)"
    fi
}

preflight() {
    sl_suite_pg_reset testdb asyncpg_intro_test
}

suite_env() {
    sl_suite_clear_env 'PG*' USE_UVLOOP 'ASYNCPG_*'
    export PGHOST="$SL_SUITE_HOST" PGPORT="$SL_SUITE_PORT" PGUSER="$SL_SUITE_USER"
    export PGPASSWORD="$SL_SUITE_PASSWORD" PGDATABASE="$SL_SUITE_DBNAME"
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    # TestConnectionAttributes starts a primary and a hot standby of its own
    # (initdb), whatever PGHOST says: not a test of the endpoint, and initdb
    # refuses to run as root.
    sl_suite_pytest "$TESTS" "$outcomes" "$log" "$limit" "$test_limit" tests \
        --deselect tests/test_connect.py::TestConnectionAttributes "$@"
}

sl_suite_main postgres postgres "$@"
