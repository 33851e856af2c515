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
#   pip download --no-deps --no-binary :all: psycopg2==2.9.13; unpack; venv
#   with pytest + pytest-timeout + psycopg2 built from the unpacked sdist
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
# Env:
#   PSYCOPG2_SUITE_CACHE        cache dir (default target/driver-suites)
#   PSYCOPG2_SUITE_RESULTS      results dir (default CACHE/results/HOST-PORT)
#   PSYCOPG2_SUITE_TIMEOUT      whole-run limit in s (default 1200)
#   PSYCOPG2_SUITE_TEST_TIMEOUT per-test limit in s (default 120)
#   PSYCOPG2_SUITE_PYTEST_ARGS  extra pytest args (e.g. "-k test_async")
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
sl_init_cleanup

PSYCOPG2_VERSION=2.9.13
PYTEST_PIN="pytest==9.2.0"
PYTEST_TIMEOUT_PIN="pytest-timeout==2.4.0"
CACHE="${PSYCOPG2_SUITE_CACHE:-$SL_ROOT/target/driver-suites}"
SDIST="$CACHE/psycopg2-$PSYCOPG2_VERSION.tar.gz"
SRC="$CACHE/psycopg2-$PSYCOPG2_VERSION"
VENV="$CACHE/venv"
STAMP="$VENV/.sluice-psycopg2-$PSYCOPG2_VERSION.ok"

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

setup() {
    mkdir -p "$CACHE"
    if [[ ! -f "$SDIST" ]]; then
        sl_log "downloading psycopg2==$PSYCOPG2_VERSION sdist"
        python3 -m pip download -q --no-deps --no-binary :all: \
            "psycopg2==$PSYCOPG2_VERSION" -d "$CACHE" >&2 || sl_die "pip download failed"
        [[ -f "$SDIST" ]] || sl_die "expected $SDIST after pip download"
    fi
    if [[ ! -f "$SRC/tests/testconfig.py" ]]; then
        sl_log "unpacking $SDIST"
        rm -rf "$SRC"
        tar -xzf "$SDIST" -C "$CACHE"
        [[ -f "$SRC/tests/testconfig.py" ]] || sl_die "sdist has no tests/testconfig.py"
    fi
    if [[ ! -f "$STAMP" ]]; then
        sl_require_cmd pg_config libpq-dev
        if [[ ! -x "$VENV/bin/python" ]]; then
            sl_log "creating venv $VENV"
            python3 -m venv "$VENV" || sl_die "python3 -m venv failed"
        fi
        sl_log "installing pytest and building psycopg2 from $SRC"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            "$PYTEST_PIN" "$PYTEST_TIMEOUT_PIN" >&2 || sl_die "pip install pytest failed"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            --force-reinstall --no-deps "$SRC" >&2 ||
            sl_die "building psycopg2 from the sdist failed"
        (cd / && "$VENV/bin/python" -c "import psycopg2, sys; assert psycopg2.__version__.startswith('$PSYCOPG2_VERSION'), psycopg2.__version__") ||
            sl_die "installed psycopg2 is not $PSYCOPG2_VERSION"
        touch "$STAMP"
        sl_log "psycopg2 $PSYCOPG2_VERSION ready in $VENV"
    fi
}

# preflight: connect, create the database and hstore if needed, report the
# settings the result depends on. Fails (non-zero) if the endpoint is unusable.
preflight() {
    (cd / && PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" - "$@") <<'EOF'
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

main() {
    if [[ "${1:-}" == "--setup-only" ]]; then
        setup
        exit 0
    fi
    [[ $# -ge 2 && $# -le 5 && "${1:-}" != -* ]] || usage
    local host=$1 port=$2 user=${3:-postgres} password=${4:-} dbname=${5:-psycopg2_test}
    local results="${PSYCOPG2_SUITE_RESULTS:-$CACHE/results/$host-$port}"
    local limit="${PSYCOPG2_SUITE_TIMEOUT:-1200}" test_limit="${PSYCOPG2_SUITE_TEST_TIMEOUT:-120}"

    setup
    mkdir -p "$results"
    rm -f "$results/outcomes.tsv" "$results/failed.txt" "$results/pytest.log"

    preflight "$host" "$port" "$user" "$password" "$dbname" || sl_die "preflight against $host:$port failed; suite not run"

    local -a extra=()
    if [[ -n "${PSYCOPG2_SUITE_PYTEST_ARGS:-}" ]]; then
        read -r -a extra <<<"$PSYCOPG2_SUITE_PYTEST_ARGS"
    fi

    sl_log "running psycopg2 $PSYCOPG2_VERSION tests against $host:$port db=$dbname user=$user (log: $results/pytest.log)"
    local start=$SECONDS rc=0 pid
    (
        cd "$SRC"
        export PSYCOPG2_TESTDB="$dbname" PSYCOPG2_TESTDB_HOST="$host" PSYCOPG2_TESTDB_PORT="$port"
        export PSYCOPG2_TESTDB_USER="$user"
        if [[ -n "$password" ]]; then export PSYCOPG2_TESTDB_PASSWORD="$password"; else unset PSYCOPG2_TESTDB_PASSWORD; fi
        unset PSYCOPG2_TEST_REPL_DSN PSYCOPG2_TEST_GREEN PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE PGOPTIONS PGSERVICE
        export SUITE_OUTCOMES="$results/outcomes.tsv"
        export PYTHONPATH="$SCRIPT_DIR/lib" PYTHONDONTWRITEBYTECODE=1
        exec timeout --kill-after=30 "$limit" "$VENV/bin/python" -m pytest tests \
            -p psycopg2_pytest_plugin -p outcomes_pytest_plugin -p no:cacheprovider -q -rfE \
            --timeout="$test_limit" "${extra[@]}"
    ) >"$results/pytest.log" 2>&1 &
    pid=$!
    sl_defer "sl_stop_pid $pid"
    wait "$pid" || rc=$?
    local elapsed=$((SECONDS - start))

    if ((rc == 124 || rc == 137)); then
        tail -n 30 "$results/pytest.log" >&2
        sl_die "psycopg2 suite timed out after ${limit}s against $host:$port"
    fi
    if ((rc != 0 && rc != 1)); then
        tail -n 30 "$results/pytest.log" >&2
        sl_die "pytest exited with status $rc against $host:$port (not a test failure)"
    fi
    [[ -s "$results/outcomes.tsv" ]] || sl_die "no test outcomes recorded ($results/outcomes.tsv)"

    sl_log "pytest: $(tail -n 1 "$results/pytest.log") [${elapsed}s wall]"
    python3 "$SCRIPT_DIR/lib/outcomes.py" summary psycopg2 "$results/outcomes.tsv" "$results/failed.txt"
    echo "failed test ids: $results/failed.txt"
    echo "per-test outcomes: $results/outcomes.tsv"
    echo "runtime: ${elapsed}s"
}

main "$@"
