#!/usr/bin/env bash
# Run psycopg2 2.9.13's own test suite (shipped in its PyPI sdist) against a
# PostgreSQL endpoint: a server, or a proxy in front of one.
#
#   scripts/psycopg2-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/psycopg2-suite.sh --setup-only
#
# Prints "psycopg2: N passed, N failed, N skipped", and writes the failed test
# ids and the per-test outcomes to a results dir (paths printed). Exits 0 when
# the suite ran, whatever its failures (the caller compares); non-zero only if
# it could not run (setup failure, endpoint unreachable, pytest crashed or
# timed out).
#
# Setup (idempotent, cached under target/driver-suites/):
#   pip download --no-deps --no-binary psycopg2 psycopg2==2.9.13; unpack; venv
#   (psycopg2-venv) with pytest + pytest-timeout + psycopg2 built from the unpacked sdist
#   (needs pg_config / libpq headers: Debian libpq-dev, installed if missing
#   when running as root).
#
# What the database needs for the reference result (700 passed, 0 failed,
# 49 skipped on PostgreSQL 15 with default settings; plain pytest would say
# 725 passed, counting the 25 module-level test_suite() loader helpers, which
# scripts/lib/psycopg2_pytest_plugin.py deselects):
#   * the database (default psycopg2_test) exists: created here through the
#     same endpoint (via the "postgres" database) if missing;
#   * extension hstore installed in it (postgresql-contrib); created here if
#     missing and possible, otherwise the hstore tests are skipped;
#   * USER is a superuser: three pg_terminate_backend tests are skipped
#     otherwise;
#   * max_prepared_transactions = 0 (the default): 30 of the 49 skips are
#     two-phase-commit tests, which run when it is > 0. The other 19: 10
#     replication tests (need PSYCOPG2_TEST_REPL_DSN, never set here), 9
#     version/build checks (libpq or server too new, lo64 present, ...).
#
# Env: PSYCOPG2_SUITE_CACHE, _RESULTS, _TIMEOUT (default 1200),
# _TEST_TIMEOUT (default 120), _PYTEST_ARGS; see scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init psycopg2 2.9.13
SL_SUITE_TIMEOUT_DEFAULT=1200
SL_SUITE_TEST_TIMEOUT_DEFAULT=120

setup() {
    sl_require_cmd pg_config libpq-dev
    sl_suite_sdist psycopg2 tests/testconfig.py
    sl_suite_build "import psycopg2; print(psycopg2.__version__)" pytest==9.2.0 pytest-timeout==2.4.0
}

# preflight: connect, create the database and hstore if needed, report the
# settings the result depends on. Fails (non-zero) if the endpoint is unusable.
preflight() {
    sl_suite_preflight_py <<'EOF'
import sys, psycopg2
host, port, user, password, dbname = sys.argv[1:6]
kw = dict(host=host, port=port, user=user, connect_timeout=15)
if password:
    kw["password"] = password

def connect(db):
    return psycopg2.connect(dbname=db, **kw)

try:
    conn = connect(dbname)
except psycopg2.OperationalError as e:
    if "does not exist" not in str(e):
        sys.exit(f"cannot connect to {host}:{port} db={dbname} user={user}: {str(e).strip()}")
    print(f"preflight: database {dbname} missing, creating it", file=sys.stderr)
    try:
        c = connect("postgres")
        c.autocommit = True
        c.cursor().execute(f'CREATE DATABASE "{dbname}"')
        c.close()
        conn = connect(dbname)
    except psycopg2.Error as e2:
        sys.exit(f"cannot create database {dbname}: {str(e2).strip()}")
conn.autocommit = True
cur = conn.cursor()
cur.execute("select 1 from pg_extension where extname = 'hstore'")
if not cur.fetchone():
    try:
        cur.execute("CREATE EXTENSION hstore")
        print("preflight: created extension hstore", file=sys.stderr)
    except psycopg2.Error as e:
        print(f"preflight: WARNING: no hstore ({str(e).strip()}); hstore tests will be skipped", file=sys.stderr)
cur.execute("select current_setting('server_version'), (select rolsuper from pg_roles where rolname = current_user), current_setting('max_prepared_transactions')")
ver, su, mpx = cur.fetchone()
print(f"preflight: server {ver}, superuser={su}, max_prepared_transactions={mpx}", file=sys.stderr)
if not su:
    print("preflight: WARNING: not a superuser; 3 tests will be skipped", file=sys.stderr)
conn.close()
EOF
}

suite_env() {
    export PSYCOPG2_TESTDB="$SL_SUITE_DBNAME" PSYCOPG2_TESTDB_HOST="$SL_SUITE_HOST" PSYCOPG2_TESTDB_PORT="$SL_SUITE_PORT"
    export PSYCOPG2_TESTDB_USER="$SL_SUITE_USER"
    if [[ -n "$SL_SUITE_PASSWORD" ]]; then export PSYCOPG2_TESTDB_PASSWORD="$SL_SUITE_PASSWORD"; else unset PSYCOPG2_TESTDB_PASSWORD; fi
    sl_suite_clear_env 'PG*' PSYCOPG2_TEST_REPL_DSN PSYCOPG2_TEST_GREEN
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    sl_suite_pytest "$SL_SUITE_SRC" "$outcomes" "$log" "$limit" "$test_limit" tests \
        -p psycopg2_pytest_plugin "$@"
}

sl_suite_main postgres psycopg2_test "$@"
