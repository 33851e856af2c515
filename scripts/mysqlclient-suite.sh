#!/usr/bin/env bash
# Run mysqlclient 2.3.1's own test suite (shipped in its PyPI sdist) against a
# MySQL/MariaDB endpoint: a server, or a proxy in front of one.
#
#   scripts/mysqlclient-suite.sh HOST PORT [USER] [PASSWORD] [DBNAME]
#   scripts/mysqlclient-suite.sh --setup-only
#
# Prints "mysqlclient: N passed, N failed, N skipped", and writes the failed
# test ids and the per-test outcomes to a results dir (paths printed). Exits 0
# when the suite ran, whatever its failures (the caller compares); non-zero
# only if it could not run (setup failure, endpoint unreachable, pytest
# crashed or timed out).
#
# Setup (idempotent, cached under target/driver-suites/):
#   pip download --no-deps --no-binary :all: mysqlclient==2.3.1; unpack; venv
#   (mysqlclient-venv) with pytest + pytest-timeout + SQLAlchemy (for
#   tests/test_sqlalchemy.py, skipped without it) + mysqlclient built from the
#   unpacked sdist (needs the MariaDB C client headers found through
#   pkg-config: Debian libmariadb-dev and pkg-config, installed if missing
#   when running as root).
#
# The suite reads its connection settings from the option file named by the
# TESTDB env var (group [MySQLdb-tests]); this script writes one per run into
# the results dir (mode 600: it holds the password) with HOST, PORT, USER,
# PASSWORD, DBNAME and default-character-set utf8mb4. Reference result on
# MariaDB 10.11 (USER root, default settings): 161 passed, 0 failed,
# 0 skipped. The database (default mysqldb_test) is created through the same
# endpoint if missing.
#
# Tests listed in scripts/lib/mysqlclient-timing-dependent.tsv (races the
# suite sets up on purpose, lost now and then on a busy machine whatever the
# endpoint) are run again alone when they fail, up to
# MYSQLCLIENT_SUITE_RETRIES times; their last outcome counts, and the retries
# are printed and kept in RESULTS/retried.txt.
#
# Env:
#   MYSQLCLIENT_SUITE_CACHE        cache dir (default target/driver-suites)
#   MYSQLCLIENT_SUITE_RESULTS      results dir (default CACHE/results/mysqlclient-HOST-PORT)
#   MYSQLCLIENT_SUITE_TIMEOUT      whole-run limit in s (default 600)
#   MYSQLCLIENT_SUITE_TEST_TIMEOUT per-test limit in s (default 60)
#   MYSQLCLIENT_SUITE_PYTEST_ARGS  extra pytest args (e.g. "-k test_cursor")
#   MYSQLCLIENT_SUITE_RETRIES      retries of a failed timing-dependent test
#                                  (default 3; 0: none)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
sl_init_cleanup

MYSQLCLIENT_VERSION=2.3.1
PYTEST_PIN="pytest==9.2.0"
PYTEST_TIMEOUT_PIN="pytest-timeout==2.4.0"
SQLALCHEMY_PIN="SQLAlchemy==2.1.9"
CACHE="${MYSQLCLIENT_SUITE_CACHE:-$SL_ROOT/target/driver-suites}"
SDIST="$CACHE/mysqlclient-$MYSQLCLIENT_VERSION.tar.gz"
SRC="$CACHE/mysqlclient-$MYSQLCLIENT_VERSION"
VENV="$CACHE/mysqlclient-venv"
STAMP="$VENV/.sluice-mysqlclient-$MYSQLCLIENT_VERSION.ok"

usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

setup() {
    mkdir -p "$CACHE"
    if [[ ! -f "$SDIST" ]]; then
        sl_log "downloading mysqlclient==$MYSQLCLIENT_VERSION sdist"
        python3 -m pip download -q --no-deps --no-binary :all: \
            "mysqlclient==$MYSQLCLIENT_VERSION" -d "$CACHE" >&2 || sl_die "pip download failed"
        [[ -f "$SDIST" ]] || sl_die "expected $SDIST after pip download"
    fi
    if [[ ! -f "$SRC/tests/configdb.py" ]]; then
        sl_log "unpacking $SDIST"
        rm -rf "$SRC"
        tar -xzf "$SDIST" -C "$CACHE"
        [[ -f "$SRC/tests/configdb.py" ]] || sl_die "sdist has no tests/configdb.py"
    fi
    if [[ ! -f "$STAMP" ]]; then
        sl_require_cmd pkg-config pkg-config
        sl_require_cmd mariadb_config libmariadb-dev
        pkg-config --exists libmariadb || pkg-config --exists mariadb || pkg-config --exists mysqlclient ||
            sl_die "pkg-config knows no MariaDB/MySQL client library (install libmariadb-dev)"
        if [[ ! -x "$VENV/bin/python" ]]; then
            sl_log "creating venv $VENV"
            python3 -m venv "$VENV" || sl_die "python3 -m venv failed"
        fi
        sl_log "installing pytest, SQLAlchemy and building mysqlclient from $SRC"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            "$PYTEST_PIN" "$PYTEST_TIMEOUT_PIN" "$SQLALCHEMY_PIN" >&2 || sl_die "pip install pytest/SQLAlchemy failed"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            --force-reinstall --no-deps "$SRC" >&2 ||
            sl_die "building mysqlclient from the sdist failed"
        (cd / && "$VENV/bin/python" -c "import MySQLdb; v = '.'.join(map(str, MySQLdb.version_info[:3])); assert v == '$MYSQLCLIENT_VERSION', v") ||
            sl_die "installed mysqlclient is not $MYSQLCLIENT_VERSION"
        touch "$STAMP"
        sl_log "mysqlclient $MYSQLCLIENT_VERSION ready in $VENV"
    fi
}

# preflight HOST PORT USER PASSWORD DBNAME: connect (without a database),
# create the database if needed, report the server. Fails (non-zero) if the
# endpoint is unusable.
preflight() {
    (cd / && PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" - "$@") <<'EOF'
import sys, MySQLdb
host, port, user, password, dbname = sys.argv[1:6]
try:
    conn = MySQLdb.connect(host=host, port=int(port), user=user, password=password,
                           connect_timeout=15, charset="utf8mb4")
except MySQLdb.Error as e:
    sys.exit(f"cannot connect to {host}:{port} user={user}: {e}")
cur = conn.cursor()
cur.execute(f"CREATE DATABASE IF NOT EXISTS `{dbname}`")
cur.execute("SELECT VERSION(), CURRENT_USER(), @@max_allowed_packet, @@local_infile, @@sql_mode")
ver, cuser, maxp, infile, mode = cur.fetchone()
print(f"preflight: server {ver}, current_user {cuser}, max_allowed_packet={maxp}, "
      f"local_infile={infile}, sql_mode={mode!r}", file=sys.stderr)
conn.close()
EOF
}

# run_pytest CNF OUTCOMES LOG LIMIT TEST_LIMIT PYTEST_ARGS...: run pytest in
# the unpacked sdist against the endpoint CNF describes, recording outcomes.
# Returns non-zero (after printing the log's tail) if pytest did not run to
# the end: timeout, crash, usage error; test failures are not errors.
run_pytest() {
    local cnf=$1 outcomes=$2 log=$3 limit=$4 test_limit=$5; shift 5
    local rc=0 pid
    (
        cd "$SRC"
        for v in $(compgen -e); do
            case "$v" in MYSQL* | MARIADB*) unset "$v" ;; esac
        done
        export TESTDB="$cnf"
        export SUITE_OUTCOMES="$outcomes"
        export PYTHONPATH="$SCRIPT_DIR/lib" PYTHONDONTWRITEBYTECODE=1
        exec timeout --kill-after=30 "$limit" "$VENV/bin/python" -m pytest \
            -p outcomes_pytest_plugin -p no:cacheprovider -q -rfEs \
            --timeout="$test_limit" "$@"
    ) >"$log" 2>&1 &
    pid=$!
    sl_defer "sl_stop_pid $pid"
    wait "$pid" || rc=$?
    if ((rc == 124 || rc == 137)); then
        tail -n 30 "$log" >&2
        sl_log "pytest timed out after ${limit}s"
        return 1
    fi
    if ((rc != 0 && rc != 1)); then
        tail -n 30 "$log" >&2
        sl_log "pytest exited with status $rc (not a test failure)"
        return 1
    fi
    return 0
}

# retry_timing_dependent CNF RESULTS TEST_LIMIT: tests listed in
# lib/mysqlclient-timing-dependent.tsv that failed are run again, alone, up to
# MYSQLCLIENT_SUITE_RETRIES more times (default 3); the last outcome replaces
# the first in RESULTS/outcomes.tsv, and every retry is logged to stderr and
# RESULTS/retried.txt. The same rule applies to every endpoint, so a test
# that fails only through a proxy still fails every try there.
retry_timing_dependent() {
    local cnf=$1 results=$2 test_limit=$3
    local list="$SCRIPT_DIR/lib/mysqlclient-timing-dependent.tsv" tries="${MYSQLCLIENT_SUITE_RETRIES:-3}"
    local id reason try out outcome k=0
    rm -f "$results/retried.txt"
    [[ -f "$list" ]] || return 0
    while IFS=$'\t' read -r id reason; do
        [[ -n "$id" && "$id" != \#* ]] || continue
        grep -qxF "$id"$'\tfailed' "$results/outcomes.tsv" || continue
        outcome=""
        k=$((k + 1))
        for ((try = 1; try <= tries; try++)); do
            out="$results/retry-$k-$try.tsv"
            rm -f "$out"
            run_pytest "$cnf" "$out" "$results/retry-$k-$try.log" 120 "$test_limit" "$id" </dev/null || true
            outcome="$(awk -F'\t' -v id="$id" '$1 == id { print $2 }' "$out" 2>/dev/null || true)"
            echo "$id failed, retry $try/$tries: ${outcome:-not run}" >>"$results/retried.txt"
            sl_log "timing-dependent test failed ($reason); retry $try/$tries: ${outcome:-not run}: $id"
            [[ "$outcome" == failed || -z "$outcome" ]] || break
        done
        if [[ -n "$outcome" ]]; then
            python3 - "$results/outcomes.tsv" "$id" "$outcome" <<'EOF'
import sys
path, nodeid, outcome = sys.argv[1:4]
lines = open(path).read().splitlines()
with open(path, "w") as f:
    for line in lines:
        n, _ = line.rsplit("\t", 1)
        f.write(f"{n}\t{outcome}\n" if n == nodeid else line + "\n")
EOF
        fi
    done <"$list"
}

main() {
    if [[ "${1:-}" == "--setup-only" ]]; then
        setup
        exit 0
    fi
    [[ $# -ge 2 && $# -le 5 && "${1:-}" != -* ]] || usage
    local host=$1 port=$2 user=${3:-root} password=${4:-} dbname=${5:-mysqldb_test}
    local results="${MYSQLCLIENT_SUITE_RESULTS:-$CACHE/results/mysqlclient-$host-$port}"
    local limit="${MYSQLCLIENT_SUITE_TIMEOUT:-600}" test_limit="${MYSQLCLIENT_SUITE_TEST_TIMEOUT:-60}"
    [[ "$dbname" =~ ^[A-Za-z0-9_]+$ ]] || sl_die "database name must be [A-Za-z0-9_]+: $dbname"

    setup
    mkdir -p "$results"
    rm -f "$results/outcomes.tsv" "$results/failed.txt" "$results/pytest.log" "$results"/retr*

    # The suite's option file. Values are written as is (the option-file
    # syntax has no quoting rules worth relying on for a password made of
    # letters, digits and '-').
    local cnf="$results/test.cnf"
    (
        umask 077
        {
            echo "[MySQLdb-tests]"
            echo "host = $host"
            echo "port = $port"
            echo "user = $user"
            [[ -z "$password" ]] || echo "password = $password"
            echo "database = $dbname"
            echo "default-character-set = utf8mb4"
        } >"$cnf"
    )

    preflight "$host" "$port" "$user" "$password" "$dbname" || sl_die "preflight against $host:$port failed; suite not run"

    local -a extra=()
    if [[ -n "${MYSQLCLIENT_SUITE_PYTEST_ARGS:-}" ]]; then
        read -r -a extra <<<"$MYSQLCLIENT_SUITE_PYTEST_ARGS"
    fi

    sl_log "running mysqlclient $MYSQLCLIENT_VERSION tests against $host:$port db=$dbname user=$user (log: $results/pytest.log)"
    local start=$SECONDS
    run_pytest "$cnf" "$results/outcomes.tsv" "$results/pytest.log" "$limit" "$test_limit" tests "${extra[@]}" ||
        sl_die "the mysqlclient suite could not run against $host:$port"
    local elapsed=$((SECONDS - start))
    [[ -s "$results/outcomes.tsv" ]] || sl_die "no test outcomes recorded ($results/outcomes.tsv)"
    sl_log "pytest: $(tail -n 1 "$results/pytest.log") [${elapsed}s wall]"
    retry_timing_dependent "$cnf" "$results" "$test_limit"
    python3 "$SCRIPT_DIR/lib/outcomes.py" summary mysqlclient "$results/outcomes.tsv" "$results/failed.txt"
    echo "failed test ids: $results/failed.txt"
    echo "per-test outcomes: $results/outcomes.tsv"
    echo "runtime: ${elapsed}s"
}

main "$@"
