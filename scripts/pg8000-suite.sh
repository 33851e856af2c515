#!/usr/bin/env bash
# Run pg8000 1.31.6's own test suite (shipped in its PyPI sdist) against a
# PostgreSQL endpoint: a server, or a proxy in front of one.
#
#   scripts/pg8000-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/pg8000-suite.sh --setup-only
#
# Prints "pg8000: N passed, N failed, N skipped", and writes the failed test
# ids and the per-test outcomes to a results dir (paths printed). Exits 0 when
# the suite ran, whatever its failures (the caller compares); non-zero only if
# it could not run (setup failure, endpoint unreachable, pytest crashed or
# timed out).
#
# pg8000 is a pure-Python driver with its own protocol code (three APIs:
# native, DB-API, legacy; unnamed and named extended-protocol statements).
# Setup (idempotent, cached under target/driver-suites/): the sdist (tests in
# test/, the package under src/, so the installed one is imported); a venv
# (pg8000-venv) with pg8000 1.31.6 and the test dependencies its pyproject
# names (pytest-mock, pytest-benchmark, pytz), pinned.
#
# The suite's fixtures connect as user "postgres" to its default database
# (also "postgres") with host, port and password from PGHOST, PGPORT and
# PGPASSWORD: USER and DBNAME must be postgres. Before the run, schema public
# of that database is dropped and created again and extension hstore is
# created (its hstore tests need it). Benchmarks run once each
# (--benchmark-disable). Reference result on PostgreSQL 15 (scram, no TLS):
# 797 passed, 10 failed, 0 skipped; the 10 need what the throwaway server
# does not offer: TLS (7: auth/test_*_ssl.py), GSSAPI (3: auth/test_gss.py).
#
# Env: PG8000_SUITE_CACHE, _RESULTS, _TIMEOUT (default 600), _TEST_TIMEOUT
# (default 60), _PYTEST_ARGS; see scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init pg8000 1.31.6

setup() {
    sl_suite_sdist pg8000 test/native/conftest.py
    if [[ ! -f "$SL_SUITE_STAMP" ]]; then
        sl_suite_pip pytest==9.2.0 pytest-timeout==2.4.0 pytest-mock==3.17.0 \
            pytest-benchmark==5.3.1 pytz==2026.6 scramp==1.5.0 python-dateutil==2.9.0.post0 \
            "pg8000==$SL_SUITE_VERSION"
        sl_suite_ready "from importlib.metadata import version; print(version('pg8000'))"
    fi
}

preflight() {
    [[ "$SL_SUITE_USER" == postgres && "$SL_SUITE_DBNAME" == postgres ]] ||
        sl_die "pg8000's fixtures connect as postgres to database postgres (got $SL_SUITE_USER, $SL_SUITE_DBNAME)"
    # shellcheck disable=SC2119  # no databases to drop
    sl_suite_pg_reset
}

suite_env() {
    sl_suite_clear_env 'PG*' TZ
    export PGHOST="$SL_SUITE_HOST" PGPORT="$SL_SUITE_PORT" PGPASSWORD="$SL_SUITE_PASSWORD"
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    # test_broken_pipe_read terminates the backend of a second connection and
    # expects its next query to fail with "network error" (EOF); directly it
    # gets ECONNRESET instead whenever the server's close beats the query's
    # write (1 to 3 of its 3 copies fail directly, run to run).
    local t skip=()
    for t in dbapi legacy native; do
        skip+=(--deselect "test/$t/test_connection.py::test_broken_pipe_read")
    done
    # test_max_parameters binds 60,000 parameters to one IN list: ~18 s per
    # run on the server alone, past the per-test limit when the machine is busy.
    skip+=(--deselect test/native/test_query.py::test_max_parameters)
    sl_suite_pytest "$SL_SUITE_SRC" "$outcomes" "$log" "$limit" "$test_limit" test \
        --benchmark-disable "${skip[@]}" "$@"
}

sl_suite_main postgres postgres "$@"
