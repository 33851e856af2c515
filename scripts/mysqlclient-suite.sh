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
#   pip download --no-deps --no-binary mysqlclient mysqlclient==2.3.1; unpack; venv
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
# Env: MYSQLCLIENT_SUITE_RETRIES, retries of a failed timing-dependent test
# (default 3; 0: none); MYSQLCLIENT_SUITE_CACHE, _RESULTS, _TIMEOUT (default
# 600), _TEST_TIMEOUT (default 60), _PYTEST_ARGS; see scripts/lib/pysuite.sh.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/pysuite.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/pysuite.sh"
sl_init_cleanup
sl_suite_init mysqlclient 2.3.1

setup() {
    sl_require_cmd pkg-config pkg-config
    sl_require_cmd mariadb_config libmariadb-dev
    pkg-config --exists libmariadb || pkg-config --exists mariadb || pkg-config --exists mysqlclient ||
        sl_die "pkg-config knows no MariaDB/MySQL client library (install libmariadb-dev)"
    sl_suite_sdist mysqlclient tests/configdb.py
    sl_suite_build "import MySQLdb; print('.'.join(map(str, MySQLdb.version_info[:3])))" pytest==9.2.0 pytest-timeout==2.4.0 SQLAlchemy==2.1.9
}

# preflight: write the suite's option file, connect (without a database),
# create the database if needed, report the server. Fails (non-zero) if the
# endpoint is unusable.
preflight() {
    # The suite's option file. Values are written as is (the option-file
    # syntax has no quoting rules worth relying on for a password made of
    # letters, digits and '-').
    CNF="$SL_SUITE_RESULTS/test.cnf"
    (
        umask 077
        {
            echo "[MySQLdb-tests]"
            echo "host = $SL_SUITE_HOST"
            echo "port = $SL_SUITE_PORT"
            echo "user = $SL_SUITE_USER"
            [[ -z "$SL_SUITE_PASSWORD" ]] || echo "password = $SL_SUITE_PASSWORD"
            echo "database = $SL_SUITE_DBNAME"
            echo "default-character-set = utf8mb4"
        } >"$CNF"
    )
    sl_suite_preflight_py <<'EOF'
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

suite_env() {
    sl_suite_clear_env 'MYSQL*' 'MARIADB*'
    export TESTDB="$CNF"
}

suite_run() {
    local outcomes=$1 log=$2 limit=$3 test_limit=$4; shift 4
    sl_suite_pytest "$SL_SUITE_SRC" "$outcomes" "$log" "$limit" "$test_limit" tests "$@"
}

# suite_after TEST_LIMIT: tests listed in
# lib/mysqlclient-timing-dependent.tsv that failed are run again, alone, up to
# MYSQLCLIENT_SUITE_RETRIES more times (default 3); the last outcome replaces
# the first in RESULTS/outcomes.tsv, and every retry is logged to stderr and
# RESULTS/retried.txt. The same rule applies to every endpoint, so a test
# that fails only through a proxy still fails every try there.
suite_after() {
    local results=$SL_SUITE_RESULTS test_limit=$1
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
            sl_suite_pytest "$SL_SUITE_SRC" "$out" "$results/retry-$k-$try.log" 120 "$test_limit" "$id" </dev/null || true
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

sl_suite_main root mysqldb_test "$@"
