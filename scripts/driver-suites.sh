#!/usr/bin/env bash
# Driver test suites through Sluice: the entry point the test runner calls.
#
#   scripts/driver-suites.sh
#
# 1. builds sluice (cargo build --release -p sluice -j 2);
# 2. starts a throwaway PostgreSQL 15 cluster on a free loopback port (scram
#    auth for TCP, superuser postgres with a random password), creates the
#    database psycopg2_test with extension hstore;
# 3. runs psycopg2 2.9.13's own test suite (scripts/psycopg2-suite.sh)
#    directly against the server;
# 4. writes a sluice config with a session-mode listener (pool 20) and a
#    transaction-mode listener (pool 10) in front of that server, starts
#    target/release/sluice --config FILE, and runs the suite through each
#    listener;
# 5. compares each through-sluice run with the direct run, test by test, and
#    exits non-zero if any count or any test's outcome differs (the differing
#    tests are printed), or if sluice fails to build, start, or dies. Tests
#    listed for the pool mode in scripts/lib/psycopg2-known-differences.tsv
#    (limitations inherent to transaction pooling) may fail without failing
#    the run; they are printed with their reasons;
# 6. unless DRIVER_SUITES_MYSQL=0: starts a throwaway MariaDB (10.11, root
#    with a random password over TCP, mysql_native_password; see
#    scripts/lib/mariadb.sh), runs mysqlclient 2.3.1's own test suite
#    (scripts/mysqlclient-suite.sh, database mysqldb_test) directly against
#    it, then through a second sluice (MySQL listeners in front of that
#    server: session mode, pool 20; transaction mode, pool 10, when asked
#    for in DRIVER_SUITES_MYSQL_MODES), and compares exactly as in step 5,
#    with scripts/lib/mysqlclient-known-differences.tsv as the list of
#    inherent differences.
#
# The last line is "driver-suites: N passed, N failed", one check per
# compared endpoint (and one per direct run), both suites together.
#
# Env:
#   DRIVER_SUITES_DIRECT_ONLY=1  only the direct runs (no build, no sluice)
#   DRIVER_SUITES_STRICT=1       no known differences: any difference fails
#   DRIVER_SUITES_PSYCOPG2=0     skip the PostgreSQL part (steps 2-5)
#   DRIVER_SUITES_MODES          sluice listeners to test with psycopg2
#                                (default "session transaction")
#   DRIVER_SUITES_PGBOUNCER=1    also run through PgBouncer (session and
#                                transaction mode) for reference; reported,
#                                never fails the run
#   DRIVER_SUITES_PG=existing    use an existing server instead of a throwaway
#                                one: DRIVER_SUITES_PG_HOST (127.0.0.1),
#                                DRIVER_SUITES_PG_PORT (5432),
#                                DRIVER_SUITES_PG_USER (postgres),
#                                DRIVER_SUITES_PG_PASSWORD (empty)
#   DRIVER_SUITES_MAX_PREPARED_XACTS  max_prepared_transactions of the
#                                throwaway server (default 0, as in the
#                                reference 700/0/49 result; > 0 runs the 30
#                                two-phase-commit tests too)
#   DRIVER_SUITES_MYSQL=0        skip the MySQL part (step 6);
#                      =existing use an existing server instead of a
#                                throwaway one: DRIVER_SUITES_MYSQL_HOST
#                                (127.0.0.1), DRIVER_SUITES_MYSQL_PORT (3306),
#                                DRIVER_SUITES_MYSQL_USER (root),
#                                DRIVER_SUITES_MYSQL_PASSWORD (empty)
#   DRIVER_SUITES_MYSQL_MODES    sluice MySQL listeners to test with
#                                mysqlclient (default "session transaction")
#   SLUICE_BIN                   use this sluice binary instead of building
#   PSYCOPG2_SUITE_*             passed through to scripts/psycopg2-suite.sh
#   MYSQLCLIENT_SUITE_*          passed through to scripts/mysqlclient-suite.sh
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

DIRECT_ONLY="${DRIVER_SUITES_DIRECT_ONLY:-0}"
WITH_PSYCOPG2="${DRIVER_SUITES_PSYCOPG2:-1}"
MODES="${DRIVER_SUITES_MODES:-session transaction}"
WITH_PGBOUNCER="${DRIVER_SUITES_PGBOUNCER:-0}"
PG_KIND="${DRIVER_SUITES_PG:-throwaway}"
MYSQL_KIND="${DRIVER_SUITES_MYSQL:-throwaway}"
MYSQL_MODES="${DRIVER_SUITES_MYSQL_MODES:-session transaction}"
RESULTS="${PSYCOPG2_SUITE_CACHE:-$SL_ROOT/target/driver-suites}/results/run"
DBNAME=psycopg2_test
MY_DBNAME=mysqldb_test

CHECKS_PASSED=0
CHECKS_FAILED=0
declare -a REPORT=()

banner() { printf '\n=== %s ===\n' "$*"; }

# The two suites. SUITE is psycopg2 or mysqlclient; its runs are labelled
# direct, sluice-MODE, ... (psycopg2) and mysqlclient-direct,
# mysqlclient-sluice-MODE (mysqlclient), with results in $RESULTS/LABEL.
declare -A SUITE_SCRIPT=([psycopg2]="$SCRIPT_DIR/psycopg2-suite.sh" [mysqlclient]="$SCRIPT_DIR/mysqlclient-suite.sh")
declare -A SUITE_PREFIX=([psycopg2]="" [mysqlclient]="mysqlclient-")
declare -A SUITE_KNOWN_DIFFS=(
    [psycopg2]="$SCRIPT_DIR/lib/psycopg2-known-differences.tsv"
    [mysqlclient]="$SCRIPT_DIR/lib/mysqlclient-known-differences.tsv"
)

# run_suite SUITE LABEL HOST PORT: run a suite, results in $RESULTS/LABEL.
run_suite() {
    local suite=$1 label=$2 host=$3 port=$4
    banner "$suite suite: $label ($host:$port)"
    case "$suite" in
        psycopg2)
            PSYCOPG2_SUITE_RESULTS="$RESULTS/$label" \
                sl_run "${SUITE_SCRIPT[$suite]}" "$host" "$port" "$PG_USER" "$PG_PASSWORD" "$DBNAME"
            ;;
        mysqlclient)
            MYSQLCLIENT_SUITE_RESULTS="$RESULTS/$label" \
                sl_run "${SUITE_SCRIPT[$suite]}" "$host" "$port" "$MY_USER" "$MY_PASSWORD" "$MY_DBNAME" ||
                return 1
            # Timing-dependent tests run again after a failure (see
            # scripts/mysqlclient-suite.sh): say so in the summary.
            if [[ -s "$RESULTS/$label/retried.txt" ]]; then
                REPORT+=("INFO  $label: timing-dependent test(s) retried: $(paste -sd ';' "$RESULTS/$label/retried.txt" | sed 's/;/; /g')")
            fi
            ;;
    esac
}

# compare SUITE LABEL MODE: compare $RESULTS/LABEL with the suite's direct
# run; count the check. Known differences of MODE are allowed unless
# DRIVER_SUITES_STRICT=1.
compare() {
    local suite=$1 label=$2 mode=$3
    local direct="${SUITE_PREFIX[$suite]}direct" known="${SUITE_KNOWN_DIFFS[$suite]}"
    local -a allow=()
    if [[ "${DRIVER_SUITES_STRICT:-0}" != 1 && -f "$known" ]]; then
        allow=("$known" "$mode")
    fi
    banner "compare: $direct vs $label"
    if python3 "$SCRIPT_DIR/lib/outcomes.py" compare "$direct" "$RESULTS/$direct/outcomes.tsv" \
        "$label" "$RESULTS/$label/outcomes.tsv" "${allow[@]}"; then
        CHECKS_PASSED=$((CHECKS_PASSED + 1))
        if ((${#allow[@]})); then
            REPORT+=("PASS  $label: same outcomes as $direct, apart from known differences (listed above, if any)")
        else
            REPORT+=("PASS  $label: same outcomes as $direct")
        fi
    else
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        REPORT+=("FAIL  $label: outcomes differ from $direct (see above; $RESULTS/$label/)")
    fi
}

# run_direct SUITE HOST PORT: the suite's direct run, counted as a check.
# Returns non-zero if the suite could not run.
run_direct() {
    local suite=$1 host=$2 port=$3
    local label="${SUITE_PREFIX[$suite]}direct"
    if ! run_suite "$suite" "$label" "$host" "$port"; then
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        REPORT+=("FAIL  $label: the $suite suite could not run directly against the server")
        return 1
    fi
    if [[ -s "$RESULTS/$label/failed.txt" ]]; then
        sl_log "WARNING: $(wc -l <"$RESULTS/$label/failed.txt") $suite test(s) fail even directly; the server setup differs from the reference"
    fi
    CHECKS_PASSED=$((CHECKS_PASSED + 1))
    REPORT+=("PASS  $label: $(python3 "$SCRIPT_DIR/lib/outcomes.py" summary "$suite" "$RESULTS/$label/outcomes.tsv" /dev/null)")
}

# suite_through SUITE LABEL PORT PID LOG: run through a proxy; a proxy that
# dies or a suite that cannot run is a failed check (the other runs still
# happen).
suite_through() {
    local suite=$1 label=$2 port=$3 pid=$4 log=$5
    if ! run_suite "$suite" "$label" 127.0.0.1 "$port"; then
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        REPORT+=("FAIL  $label: suite could not run through the proxy")
        return 1
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        if grep -q "shutting down" "$log" 2>/dev/null; then
            REPORT+=("FAIL  $label: proxy process $pid stopped during the suite: it logged a shutdown, so something sent it SIGTERM/SIGINT")
        else
            REPORT+=("FAIL  $label: proxy process $pid died during the suite")
        fi
        return 1
    fi
    return 0
}

# through_sluice SUITE MODE PORT PID LOG: one through-sluice run and its
# comparison with the direct run.
through_sluice() {
    local suite=$1 mode=$2 port=$3 pid=$4 log=$5
    local label="${SUITE_PREFIX[$suite]}sluice-$mode"
    if suite_through "$suite" "$label" "$port" "$pid" "$log"; then
        compare "$suite" "$label" "$mode"
    else
        sl_log "sluice log tail ($log):"
        tail -n 30 "$log" >&2 || true
        kill -0 "$pid" 2>/dev/null || return 1
    fi
    return 0
}

# check_modes WHAT LIST: every entry is session, transaction or tx.
check_modes() {
    local m
    for m in $2; do
        [[ "$m" =~ ^(session|transaction|tx)$ ]] || sl_die "unknown $1 entry: $m"
    done
}

# two_ports: set PORT_A and PORT_B to two different free ports.
two_ports() {
    PORT_A="$(sl_free_port)"
    PORT_B="$(sl_free_port)"
    while [[ "$PORT_B" == "$PORT_A" ]]; do PORT_B="$(sl_free_port)"; done
}

psycopg2_part() {
    if [[ "$PG_KIND" == existing ]]; then
        SL_PG_HOST="${DRIVER_SUITES_PG_HOST:-127.0.0.1}"
        SL_PG_PORT="${DRIVER_SUITES_PG_PORT:-5432}"
        PG_USER="${DRIVER_SUITES_PG_USER:-postgres}"
        PG_PASSWORD="${DRIVER_SUITES_PG_PASSWORD:-}"
        SL_PG_USER=$PG_USER
        export PGPASSWORD="$PG_PASSWORD"
        sl_log "using existing PostgreSQL at $SL_PG_HOST:$SL_PG_PORT"
    else
        PG_USER=postgres
        PG_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        sl_require_cmd "$SL_PGBIN/initdb" postgresql
        sl_pg_start_throwaway "$PG_PASSWORD" \
            "max_prepared_transactions = ${DRIVER_SUITES_MAX_PREPARED_XACTS:-0}"
    fi
    # hstore ships in Debian's postgresql-15 package (postgresql-contrib is a
    # metapackage for it); without it ~50 hstore tests turn into skips.
    if [[ -z "$(sl_pg_admin -tAc "select 1 from pg_database where datname = '$DBNAME'")" ]]; then
        sl_pg_admin -c "CREATE DATABASE $DBNAME"
    fi
    SL_PG_ADMIN_DB=$DBNAME sl_pg_admin -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS hstore"

    # Start sluice before the long direct run, so a broken binary or config
    # fails within seconds.
    local mode port log="$RESULTS/sluice.log" pid=""
    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "sluice"
        local cfg="$RESULTS/sluice.toml"
        two_ports
        sl_sluice_write_config "$cfg" "$SL_PG_HOST" "$SL_PG_PORT" \
            "session:session:20:$PORT_A" "tx:transaction:10:$PORT_B"
        sl_log "sluice config: $cfg"
        sl_sluice_start "$cfg" "$log" "$PORT_A" "$PORT_B"
        pid=$SL_SLUICE_PID
    fi
    local session_port=${PORT_A:-} tx_port=${PORT_B:-}

    run_direct psycopg2 "$SL_PG_HOST" "$SL_PG_PORT" || sl_die "the psycopg2 suite could not run directly against the server"

    if [[ "$WITH_PGBOUNCER" == 1 ]]; then
        local pmode
        for pmode in session transaction; do
            sl_pgbouncer_start "$pmode" "$SL_PG_HOST" "$SL_PG_PORT" "$PG_USER" "$PG_PASSWORD" 20 2000
            if run_suite psycopg2 "pgbouncer-$pmode" 127.0.0.1 "$SL_PGB_PORT"; then
                banner "compare (reference only): direct vs pgbouncer-$pmode"
                python3 "$SCRIPT_DIR/lib/outcomes.py" compare direct "$RESULTS/direct/outcomes.tsv" \
                    "pgbouncer-$pmode" "$RESULTS/pgbouncer-$pmode/outcomes.tsv" || true
                REPORT+=("INFO  pgbouncer-$pmode: $(python3 "$SCRIPT_DIR/lib/outcomes.py" summary psycopg2 "$RESULTS/pgbouncer-$pmode/outcomes.tsv" /dev/null)")
            else
                REPORT+=("INFO  pgbouncer-$pmode: suite could not run")
            fi
            sl_stop_pid "$SL_PGB_PID"
        done
    fi

    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "psycopg2 suite through sluice"
        for mode in $MODES; do
            case "$mode" in
                session) port=$session_port ;;
                transaction | tx) mode=transaction port=$tx_port ;;
            esac
            through_sluice psycopg2 "$mode" "$port" "$pid" "$log" || break
        done
        # Done with PostgreSQL: free the CPU for what follows.
        sl_stop_pid "$pid"
    fi
}

mysql_part() {
    banner "MariaDB"
    if [[ "$MYSQL_KIND" == existing ]]; then
        SL_MY_HOST="${DRIVER_SUITES_MYSQL_HOST:-127.0.0.1}"
        SL_MY_PORT="${DRIVER_SUITES_MYSQL_PORT:-3306}"
        MY_USER="${DRIVER_SUITES_MYSQL_USER:-root}"
        MY_PASSWORD="${DRIVER_SUITES_MYSQL_PASSWORD:-}"
        sl_log "using existing MySQL/MariaDB at $SL_MY_HOST:$SL_MY_PORT"
    else
        MY_USER=root
        MY_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        sl_mariadb_start "$MY_PASSWORD"
    fi

    local mode port log="$RESULTS/sluice-mysql.log" pid=""
    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "sluice (MySQL listeners)"
        local cfg="$RESULTS/sluice-mysql.toml"
        two_ports
        sl_sluice_write_mysql_config "$cfg" "$SL_MY_HOST" "$SL_MY_PORT" \
            "session:session:20:$PORT_A" "tx:transaction:10:$PORT_B"
        sl_log "sluice config: $cfg"
        sl_sluice_start "$cfg" "$log" "$PORT_A" "$PORT_B"
        pid=$SL_SLUICE_PID
    fi
    local session_port=${PORT_A:-} tx_port=${PORT_B:-}

    run_direct mysqlclient "$SL_MY_HOST" "$SL_MY_PORT" || return 0

    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "mysqlclient suite through sluice"
        for mode in $MYSQL_MODES; do
            case "$mode" in
                session) port=$session_port ;;
                transaction | tx) mode=transaction port=$tx_port ;;
            esac
            through_sluice mysqlclient "$mode" "$port" "$pid" "$log" || break
        done
    fi
}

main() {
    local start=$SECONDS
    check_modes DRIVER_SUITES_MODES "$MODES"
    check_modes DRIVER_SUITES_MYSQL_MODES "$MYSQL_MODES"
    [[ "$MYSQL_KIND" =~ ^(0|throwaway|existing)$ ]] ||
        sl_die "DRIVER_SUITES_MYSQL must be 0, throwaway or existing, not $MYSQL_KIND"
    [[ "$WITH_PSYCOPG2" != 0 || "$MYSQL_KIND" != 0 ]] ||
        sl_die "DRIVER_SUITES_PSYCOPG2=0 and DRIVER_SUITES_MYSQL=0: nothing to run"
    rm -rf "$RESULTS"
    mkdir -p "$RESULTS"

    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "build"
        sl_sluice_build
    fi

    banner "setup"
    [[ "$WITH_PSYCOPG2" == 0 ]] || sl_run "$SCRIPT_DIR/psycopg2-suite.sh" --setup-only
    [[ "$MYSQL_KIND" == 0 ]] || sl_run "$SCRIPT_DIR/mysqlclient-suite.sh" --setup-only

    if [[ "$WITH_PSYCOPG2" != 0 ]]; then
        psycopg2_part
    else
        sl_log "psycopg2 suite skipped (DRIVER_SUITES_PSYCOPG2=0)"
    fi
    if [[ "$MYSQL_KIND" != 0 ]]; then
        mysql_part
    else
        sl_log "mysqlclient suite skipped (DRIVER_SUITES_MYSQL=0)"
    fi

    banner "summary ($((SECONDS - start))s)"
    printf '%s\n' "${REPORT[@]}"
    echo "results: $RESULTS"
    echo "driver-suites: $CHECKS_PASSED passed, $CHECKS_FAILED failed"
    ((CHECKS_FAILED == 0))
}

main "$@"
