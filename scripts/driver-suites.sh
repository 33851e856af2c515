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
#    the run; they are printed with their reasons.
#
# The last line is "driver-suites: N passed, N failed", one check per
# compared endpoint.
#
# Env:
#   DRIVER_SUITES_DIRECT_ONLY=1  only the direct run (no build, no sluice)
#   DRIVER_SUITES_STRICT=1       no known differences: any difference fails
#   DRIVER_SUITES_MODES          sluice listeners to test (default
#                                "session transaction")
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
#   SLUICE_BIN                   use this sluice binary instead of building
#   PSYCOPG2_SUITE_*             passed through to scripts/psycopg2-suite.sh
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
sl_init_cleanup

DIRECT_ONLY="${DRIVER_SUITES_DIRECT_ONLY:-0}"
MODES="${DRIVER_SUITES_MODES:-session transaction}"
WITH_PGBOUNCER="${DRIVER_SUITES_PGBOUNCER:-0}"
PG_KIND="${DRIVER_SUITES_PG:-throwaway}"
RESULTS="${PSYCOPG2_SUITE_CACHE:-$SL_ROOT/target/driver-suites}/results/run"
DBNAME=psycopg2_test
KNOWN_DIFFS="$SCRIPT_DIR/lib/psycopg2-known-differences.tsv"

CHECKS_PASSED=0
CHECKS_FAILED=0
declare -a REPORT=()

banner() { printf '\n=== %s ===\n' "$*"; }

# run_suite LABEL HOST PORT: run the psycopg2 suite, results in $RESULTS/LABEL.
run_suite() {
    local label=$1 host=$2 port=$3
    banner "psycopg2 suite: $label ($host:$port)"
    PSYCOPG2_SUITE_RESULTS="$RESULTS/$label" \
        sl_run "$SCRIPT_DIR/psycopg2-suite.sh" "$host" "$port" "$PG_USER" "$PG_PASSWORD" "$DBNAME"
}

# compare LABEL MODE: compare $RESULTS/LABEL with the direct run; count the
# check. Known differences of MODE are allowed unless DRIVER_SUITES_STRICT=1.
compare() {
    local label=$1 mode=$2
    local -a allow=()
    if [[ "${DRIVER_SUITES_STRICT:-0}" != 1 && -f "$KNOWN_DIFFS" ]]; then
        allow=("$KNOWN_DIFFS" "$mode")
    fi
    banner "compare: direct vs $label"
    if python3 "$SCRIPT_DIR/lib/outcomes.py" compare direct "$RESULTS/direct/outcomes.tsv" \
        "$label" "$RESULTS/$label/outcomes.tsv" "${allow[@]}"; then
        CHECKS_PASSED=$((CHECKS_PASSED + 1))
        if ((${#allow[@]})); then
            REPORT+=("PASS  $label: same outcomes as direct, apart from known differences (listed above, if any)")
        else
            REPORT+=("PASS  $label: same outcomes as direct")
        fi
    else
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        REPORT+=("FAIL  $label: outcomes differ from direct (see above; $RESULTS/$label/)")
    fi
}

# suite_through LABEL PORT PID: run through a proxy; a proxy that dies or a
# suite that cannot run is a failed check (the other runs still happen).
suite_through() {
    local label=$1 port=$2 pid=$3
    if ! run_suite "$label" 127.0.0.1 "$port"; then
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        REPORT+=("FAIL  $label: suite could not run through the proxy")
        return 1
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        CHECKS_FAILED=$((CHECKS_FAILED + 1))
        if grep -q "shutting down" "$RESULTS/sluice.log" 2>/dev/null; then
            REPORT+=("FAIL  $label: proxy process $pid stopped during the suite: it logged a shutdown, so something sent it SIGTERM/SIGINT")
        else
            REPORT+=("FAIL  $label: proxy process $pid died during the suite")
        fi
        return 1
    fi
    return 0
}

main() {
    local start=$SECONDS m
    for m in $MODES; do
        [[ "$m" =~ ^(session|transaction|tx)$ ]] || sl_die "unknown DRIVER_SUITES_MODES entry: $m"
    done
    rm -rf "$RESULTS"
    mkdir -p "$RESULTS"

    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "build"
        sl_sluice_build
    fi

    banner "setup"
    sl_run "$SCRIPT_DIR/psycopg2-suite.sh" --setup-only

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
    local session_port="" tx_port="" mode label port
    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "sluice"
        local cfg="$RESULTS/sluice.toml"
        session_port="$(sl_free_port)"
        tx_port="$(sl_free_port)"
        while [[ "$tx_port" == "$session_port" ]]; do tx_port="$(sl_free_port)"; done
        sl_sluice_write_config "$cfg" "$SL_PG_HOST" "$SL_PG_PORT" \
            "session:session:20:$session_port" "tx:transaction:10:$tx_port"
        sl_log "sluice config: $cfg"
        sl_sluice_start "$cfg" "$RESULTS/sluice.log" "$session_port" "$tx_port"
    fi

    run_suite direct "$SL_PG_HOST" "$SL_PG_PORT" || sl_die "the psycopg2 suite could not run directly against the server"
    if [[ -s "$RESULTS/direct/failed.txt" ]]; then
        sl_log "WARNING: $(wc -l <"$RESULTS/direct/failed.txt") test(s) fail even directly; the server setup differs from the reference"
    fi
    CHECKS_PASSED=$((CHECKS_PASSED + 1))
    REPORT+=("PASS  direct: $(python3 "$SCRIPT_DIR/lib/outcomes.py" summary psycopg2 "$RESULTS/direct/outcomes.tsv" /dev/null)")

    if [[ "$WITH_PGBOUNCER" == 1 ]]; then
        local pmode
        for pmode in session transaction; do
            sl_pgbouncer_start "$pmode" "$SL_PG_HOST" "$SL_PG_PORT" "$PG_USER" "$PG_PASSWORD" 20 2000
            if run_suite "pgbouncer-$pmode" 127.0.0.1 "$SL_PGB_PORT"; then
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
                *) sl_die "unknown DRIVER_SUITES_MODES entry: $mode" ;;
            esac
            label="sluice-$mode"
            if suite_through "$label" "$port" "$SL_SLUICE_PID"; then
                compare "$label" "$mode"
            else
                sl_log "sluice log tail ($RESULTS/sluice.log):"
                tail -n 30 "$RESULTS/sluice.log" >&2 || true
                kill -0 "$SL_SLUICE_PID" 2>/dev/null || break
            fi
        done
    fi

    banner "summary ($((SECONDS - start))s)"
    printf '%s\n' "${REPORT[@]}"
    echo "results: $RESULTS"
    echo "driver-suites: $CHECKS_PASSED passed, $CHECKS_FAILED failed"
    ((CHECKS_FAILED == 0))
}

main "$@"
