#!/usr/bin/env bash
# Run MariaDB Connector/Python 1.1.14's own test suite (PyPI "mariadb",
# shipped in its sdist) against a MySQL/MariaDB endpoint: a server, or a proxy
# in front of one.
#
#   scripts/mariadb-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/mariadb-suite.sh --setup-only
#
# Prints "mariadb: N passed, N failed, N skipped", and writes the failed test
# ids and the per-test outcomes to a results dir (paths printed). Exits 0 when
# the suite ran, whatever its failures (the caller compares); non-zero only if
# it could not run (setup failure, endpoint unreachable, pytest crashed or
# timed out).
#
# Connector/Python is a C extension on MariaDB Connector/C: unlike mysqlclient
# it runs parameters through the binary protocol (COM_STMT_PREPARE/EXECUTE,
# and MariaDB's bulk executemany where the server offers it), has a
# connection pool of its own, turns autocommit off by default, and uses
# COM_CHANGE_USER, COM_RESET_CONNECTION, KILL and auto-reconnect. Setup
# (idempotent, cached under target/driver-suites/): the sdist (tests in
# testing/test); a venv (mariadb-venv) with pytest, pytest-timeout and the
# connector built from the sdist (needs mariadb_config and the Connector/C
# headers: Debian libmariadb-dev, installed if missing when running as root).
#
# The suite reads TEST_DB_HOST, TEST_DB_PORT, TEST_DB_USER, TEST_DB_PASSWORD
# and TEST_DB_DATABASE (default testp, created here if missing); it creates a
# user of its own (foo, for COM_CHANGE_USER), so USER needs CREATE USER and
# GRANT OPTION. Its TLS test needs the endpoint to offer TLS. Reference result
# on MariaDB 10.11 with TLS (root): 187 passed, 0 failed, 7 skipped.
#
# Env: MARIADB_SUITE_CACHE, _RESULTS, _TIMEOUT (default 600), _TEST_TIMEOUT
# (default 60), _PYTEST_ARGS; see scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init mariadb 1.1.14

setup() {
    sl_require_cmd mariadb_config libmariadb-dev
    sl_suite_sdist mariadb testing/test/conf_test.py
    sl_suite_build "import mariadb; print(mariadb.__version__)" pytest==9.2.0 pytest-timeout==2.4.0
}

preflight() {
    sl_suite_preflight_py <<'EOF'
import sys, mariadb
host, port, user, password, dbname = sys.argv[1:6]
try:
    conn = mariadb.connect(host=host, port=int(port), user=user, password=password, connect_timeout=15)
except mariadb.Error as e:
    sys.exit(f"cannot connect to {host}:{port} user={user}: {e}")
cur = conn.cursor()
cur.execute(f"CREATE DATABASE IF NOT EXISTS `{dbname}`")
cur.execute("SELECT VERSION(), @@have_ssl")
ver, ssl = cur.fetchone()
print(f"preflight: server {ver}, have_ssl={ssl}", file=sys.stderr)
conn.close()
EOF
}

suite_env() {
    sl_suite_clear_env 'MYSQL*' 'MARIADB*' 'TEST_*' srv LOCAL_DB
    export TEST_DB_HOST="$SL_SUITE_HOST" TEST_DB_PORT="$SL_SUITE_PORT" TEST_DB_USER="$SL_SUITE_USER"
    export TEST_DB_PASSWORD="$SL_SUITE_PASSWORD" TEST_DB_DATABASE="$SL_SUITE_DBNAME"
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    # Never run: test_conn_timeout_exception connects to 8.8.8.8 to see a
    # connect timeout, and test_multi_host resolves the made-up host name
    # non_existant; tests here talk to loopback addresses only.
    sl_suite_pytest "$SL_SUITE_SRC/testing" "$outcomes" "$log" "$limit" "$test_limit" \
        --rootdir "$SL_SUITE_SRC/testing" test \
        --deselect test/integration/test_exception.py::TestException::test_conn_timeout_exception \
        --deselect test/integration/test_connection.py::TestConnection::test_multi_host "$@"
}

sl_suite_main root testp "$@"
