#!/usr/bin/env bash
# Driver test suites through Sluice: the entry point the test runner calls.
#
#   scripts/driver-suites.sh
#
# Six drivers' own test suites, each run directly against a throwaway server,
# then through Sluice in session mode and in transaction mode, and compared
# test by test:
#   PostgreSQL  psycopg2 2.9.13 (libpq)      scripts/psycopg2-suite.sh
#               asyncpg 0.30.0               scripts/asyncpg-suite.sh
#               pg8000 1.31.6 (pure Python)  scripts/pg8000-suite.sh
#   MySQL       mysqlclient 2.3.1 (libmariadb) scripts/mysqlclient-suite.sh
#               aiomysql 0.3.2 (PyMySQL, TLS) scripts/aiomysql-suite.sh
#               MariaDB Connector/Python 1.1.14 scripts/mariadb-suite.sh
# The results are summed up in docs/compatibility.md.
#
# 1. builds sluice (cargo build --release -p sluice; SLUICE_BUILD_JOBS jobs,
#    default 2);
# 2. starts a throwaway PostgreSQL 15 cluster on a free loopback port (scram
#    auth for TCP, superuser postgres with a random password), creates the
#    database psycopg2_test with extension hstore;
# 3. writes a sluice config with a session-mode listener (pool 20) and a
#    transaction-mode listener (pool 10) in front of that server and starts
#    target/release/sluice --config FILE;
# 4. for each PostgreSQL suite: runs it directly against the server, then
#    through each listener, and compares each through-sluice run with the
#    direct run, test by test: a check fails if any count or any test's
#    outcome differs (the differing tests are printed), or if sluice dies.
#    Tests listed for the pool mode in scripts/lib/SUITE-known-differences.tsv
#    may fail without failing the check; they are printed with their reasons
#    ("inherent": a limitation of transaction pooling; "open": a Sluice bug
#    being fixed);
# 5. unless DRIVER_SUITES_MYSQL=0: starts a throwaway MariaDB (10.11, root
#    with a random password over TCP, mysql_native_password, TLS with a
#    certificate made for the run; see scripts/lib/mariadb.sh) and a second
#    sluice (MySQL listeners in front of that server: session mode, pool 20;
#    transaction mode, pool 10, clients waiting at most 5 s for a server
#    connection; "lazy": session mode with assign_server = "first_statement",
#    Sluice checking passwords, pool 100, 5 s waits; all accept TLS from
#    clients with the same certificate, and use TLS towards the server), and
#    runs and compares the MySQL suites exactly as in step 4.
#
# The last line is "driver-suites: N passed, N failed", one check per
# compared endpoint (and one per direct run), all suites together.
#
# Env:
#   DRIVER_SUITES_DIRECT_ONLY=1  only the direct runs (no build, no sluice)
#   DRIVER_SUITES_STRICT=1       no known differences: any difference fails
#   DRIVER_SUITES_PSYCOPG2=0, DRIVER_SUITES_ASYNCPG=0, DRIVER_SUITES_PG8000=0,
#   DRIVER_SUITES_MYSQLCLIENT=0, DRIVER_SUITES_AIOMYSQL=0,
#   DRIVER_SUITES_MARIADB=0
#                                skip that suite
#   DRIVER_SUITES_MODES          sluice listeners to test the PostgreSQL
#                                suites with (default "session transaction")
#   DRIVER_SUITES_PGBOUNCER=1    also run the PostgreSQL suites through
#                                PgBouncer (session and transaction mode) for
#                                reference; reported, never fails the run
#   DRIVER_SUITES_PG=0           skip the PostgreSQL part (steps 2-4);
#                   =existing    use an existing server instead of a
#                                throwaway one: DRIVER_SUITES_PG_HOST
#                                (127.0.0.1), DRIVER_SUITES_PG_PORT (5432),
#                                DRIVER_SUITES_PG_USER (postgres),
#                                DRIVER_SUITES_PG_PASSWORD (empty). The
#                                asyncpg and pg8000 suites drop and recreate
#                                schema public of its database "postgres"
#   DRIVER_SUITES_MAX_PREPARED_XACTS  max_prepared_transactions of the
#                                throwaway server (default 0, as in the
#                                reference 700/0/49 result; > 0 runs the 30
#                                two-phase-commit tests too)
#   DRIVER_SUITES_MYSQL=0        skip the MySQL part (step 5);
#                      =existing use an existing server instead of a
#                                throwaway one: DRIVER_SUITES_MYSQL_HOST
#                                (127.0.0.1), DRIVER_SUITES_MYSQL_PORT (3306),
#                                DRIVER_SUITES_MYSQL_USER (root),
#                                DRIVER_SUITES_MYSQL_PASSWORD (empty),
#                                DRIVER_SUITES_MYSQL_TLS_DIR (the server's
#                                ca.pem, server-cert.pem, server-key.pem,
#                                which sluice presents too; aiomysql's suite
#                                needs TLS)
#   DRIVER_SUITES_MYSQL_MODES    sluice listeners to test the MySQL suites
#                                with (default "session transaction lazy";
#                                lazy: session mode with assign_server =
#                                "first_statement", Sluice checking passwords)
#   DRIVER_SUITES_PARALLEL=0     run the MySQL part after the PostgreSQL part
#                                (default: both at once, as two runs of this
#                                script, logs printed at the end)
#   DRIVER_SUITES_RESULTS        where results go (default
#                                target/driver-suites/results/run)
#   SLUICE_BIN                   use this sluice binary instead of building
#   SUITE_SUITE_*                passed through to scripts/SUITE-suite.sh
#                                (e.g. ASYNCPG_SUITE_PYTEST_ARGS)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

DIRECT_ONLY="${DRIVER_SUITES_DIRECT_ONLY:-0}"
MODES="${DRIVER_SUITES_MODES:-session transaction}"
WITH_PGBOUNCER="${DRIVER_SUITES_PGBOUNCER:-0}"
PG_KIND="${DRIVER_SUITES_PG:-throwaway}"
MYSQL_KIND="${DRIVER_SUITES_MYSQL:-throwaway}"
MYSQL_MODES="${DRIVER_SUITES_MYSQL_MODES:-session transaction lazy}"
RESULTS="${DRIVER_SUITES_RESULTS:-${PSYCOPG2_SUITE_CACHE:-$SL_ROOT/target/driver-suites}/results/run}"

CHECKS_PASSED=0
CHECKS_FAILED=0
declare -a REPORT=()

banner() { printf '\n=== %s ===\n' "$*"; }

# The suites, by protocol. Suite SUITE is scripts/SUITE-suite.sh, runs in
# database SUITE_DB[SUITE], and its runs are labelled SUITE-direct,
# SUITE-sluice-MODE, ... (psycopg2's, the first suite, direct and
# sluice-MODE), with results in $RESULTS/LABEL; its known differences are in
# scripts/lib/SUITE-known-differences.tsv.
PG_SUITES=(psycopg2 asyncpg pg8000)
MY_SUITES=(mysqlclient aiomysql mariadb)
declare -A SUITE_DB=([psycopg2]=psycopg2_test [asyncpg]=postgres [pg8000]=postgres
    [mysqlclient]=mysqldb_test [aiomysql]=test_pymysql [mariadb]=testp)

# suite_prefix SUITE: the label prefix of SUITE's runs.
suite_prefix() {
    [[ "$1" == psycopg2 ]] || printf '%s-' "$1"
}

# enabled_suites SUITE...: those not turned off by DRIVER_SUITES_<SUITE>=0.
enabled_suites() {
    local suite var
    for suite in "$@"; do
        var="DRIVER_SUITES_${suite^^}"
        [[ "${!var:-1}" == 0 ]] || printf '%s\n' "$suite"
    done
}

# run_suite SUITE LABEL HOST PORT: run a suite, results in $RESULTS/LABEL.
run_suite() {
    local suite=$1 label=$2 host=$3 port=$4 user=${PG_USER:-} password=${PG_PASSWORD:-}
    if [[ " ${MY_SUITES[*]} " == *" $suite "* ]]; then
        user=$MY_USER password=$MY_PASSWORD
    fi
    banner "$suite suite: $label ($host:$port)"
    sl_run env "${suite^^}_SUITE_RESULTS=$RESULTS/$label" \
        "$SCRIPT_DIR/$suite-suite.sh" "$host" "$port" "$user" "$password" "${SUITE_DB[$suite]}" ||
        return 1
    # Timing-dependent tests run again after a failure (see
    # scripts/mysqlclient-suite.sh): say so in the summary.
    if [[ -s "$RESULTS/$label/retried.txt" ]]; then
        REPORT+=("INFO  $label: timing-dependent test(s) retried: $(paste -sd ';' "$RESULTS/$label/retried.txt" | sed 's/;/; /g')")
    fi
}

# compare SUITE LABEL MODE: compare $RESULTS/LABEL with the suite's direct
# run; count the check. Known differences of MODE are allowed unless
# DRIVER_SUITES_STRICT=1.
compare() {
    local suite=$1 label=$2 mode=$3
    local direct known="$SCRIPT_DIR/lib/$suite-known-differences.tsv"
    direct="$(suite_prefix "$suite")direct"
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
    local label
    label="$(suite_prefix "$suite")direct"
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
    local label
    label="$(suite_prefix "$suite")sluice-$mode"
    if suite_through "$suite" "$label" "$port" "$pid" "$log"; then
        compare "$suite" "$label" "$mode"
    else
        sl_log "sluice log tail ($log):"
        tail -n 30 "$log" >&2 || true
        kill -0 "$pid" 2>/dev/null || return 1
    fi
    return 0
}

# check_modes WHAT LIST [MORE]: every entry is session, transaction or tx
# (or one of the regex alternatives MORE).
check_modes() {
    local m
    for m in $2; do
        [[ "$m" =~ ^(session|transaction|tx${3:+|$3})$ ]] || sl_die "unknown $1 entry: $m"
    done
}

# two_ports: set PORT_A, PORT_B and PORT_C to three different free ports.
two_ports() {
    PORT_A="$(sl_free_port)"
    PORT_B="$(sl_free_port)"
    while [[ "$PORT_B" == "$PORT_A" ]]; do PORT_B="$(sl_free_port)"; done
    PORT_C="$(sl_free_port)"
    while [[ "$PORT_C" == "$PORT_A" || "$PORT_C" == "$PORT_B" ]]; do PORT_C="$(sl_free_port)"; done
}

# suites_against SESSION_PORT TX_PORT PID LOG MODES SUITE...: each SUITE
# directly against $SRV_HOST:$SRV_PORT, then (unless DIRECT_ONLY) through the
# sluice listeners of MODES, compared with the direct run. A suite that cannot
# run directly is a failed check; the others go on.
suites_against() {
    local session_port=$1 tx_port=$2 pid=$3 log=$4 modes=$5; shift 5
    local suite mode port pmode label
    for suite in "$@"; do
        run_direct "$suite" "$SRV_HOST" "$SRV_PORT" || continue
        label="$(suite_prefix "$suite")"
        if [[ "$WITH_PGBOUNCER" == 1 && " ${PG_SUITES[*]} " == *" $suite "* ]]; then
            for pmode in session transaction; do
                sl_pgbouncer_start "$pmode" "$SL_PG_HOST" "$SL_PG_PORT" "$PG_USER" "$PG_PASSWORD" 20 2000
                if run_suite "$suite" "${label}pgbouncer-$pmode" 127.0.0.1 "$SL_PGB_PORT"; then
                    banner "compare (reference only): ${label}direct vs ${label}pgbouncer-$pmode"
                    python3 "$SCRIPT_DIR/lib/outcomes.py" compare "${label}direct" "$RESULTS/${label}direct/outcomes.tsv" \
                        "${label}pgbouncer-$pmode" "$RESULTS/${label}pgbouncer-$pmode/outcomes.tsv" || true
                    REPORT+=("INFO  ${label}pgbouncer-$pmode: $(python3 "$SCRIPT_DIR/lib/outcomes.py" summary "$suite" "$RESULTS/${label}pgbouncer-$pmode/outcomes.tsv" /dev/null)")
                else
                    REPORT+=("INFO  ${label}pgbouncer-$pmode: suite could not run")
                fi
                sl_stop_pid "$SL_PGB_PID"
            done
        fi
        [[ "$DIRECT_ONLY" != 1 ]] || continue
        banner "$suite suite through sluice"
        for mode in $modes; do
            case "$mode" in
                session) port=$session_port ;;
                transaction | tx) mode=transaction port=$tx_port ;;
                lazy) port=${PORT_C:-} ;;
            esac
            through_sluice "$suite" "$mode" "$port" "$pid" "$log" || return 0
        done
    done
}

# pg_part SUITE...: the PostgreSQL server, sluice in front of it, the SUITEs.
pg_part() {
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
    # metapackage for it); without it ~50 psycopg2 hstore tests turn into
    # skips.
    local db=${SUITE_DB[psycopg2]}
    if [[ -z "$(sl_pg_admin -tAc "select 1 from pg_database where datname = '$db'")" ]]; then
        sl_pg_admin -c "CREATE DATABASE $db"
    fi
    SL_PG_ADMIN_DB=$db sl_pg_admin -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS hstore"

    # Start sluice before the long direct runs, so a broken binary or config
    # fails within seconds.
    local log="$RESULTS/sluice.log" pid=""
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
    SRV_HOST=$SL_PG_HOST SRV_PORT=$SL_PG_PORT
    suites_against "${PORT_A:-}" "${PORT_B:-}" "$pid" "$log" "$MODES" "$@"
    # Done with PostgreSQL: free the CPU for what follows.
    [[ -z "$pid" ]] || sl_stop_pid "$pid"
}

# mysql_part SUITE...: the MySQL server, sluice in front of it, the SUITEs.
mysql_part() {
    banner "MariaDB"
    local tls
    if [[ "$MYSQL_KIND" == existing ]]; then
        SL_MY_HOST="${DRIVER_SUITES_MYSQL_HOST:-127.0.0.1}"
        SL_MY_PORT="${DRIVER_SUITES_MYSQL_PORT:-3306}"
        MY_USER="${DRIVER_SUITES_MYSQL_USER:-root}"
        MY_PASSWORD="${DRIVER_SUITES_MYSQL_PASSWORD:-}"
        tls="${DRIVER_SUITES_MYSQL_TLS_DIR:-}"
        sl_log "using existing MySQL/MariaDB at $SL_MY_HOST:$SL_MY_PORT"
    else
        MY_USER=root
        MY_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
        tls="$RESULTS/tls"
        sl_test_certs "$tls"
        sl_mariadb_start "$MY_PASSWORD" --ssl-ca="$tls/ca.pem" \
            --ssl-cert="$tls/server-cert.pem" --ssl-key="$tls/server-key.pem"
    fi
    if [[ -n "$tls" ]]; then
        export AIOMYSQL_SUITE_CA_FILE="$tls/ca.pem"
        SL_SLUICE_TLS_CERT="$tls/server-cert.pem" SL_SLUICE_TLS_KEY="$tls/server-key.pem"
    fi

    local log="$RESULTS/sluice-mysql.log" pid=""
    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "sluice (MySQL listeners)"
        local cfg="$RESULTS/sluice-mysql.toml"
        two_ports
        # MariaDB Connector/Python's pool tests hold more connections in
        # transactions (autocommit off) than the transaction pool has: 5 s of
        # waiting instead of Sluice's default 30 s each.
        # The lazy listener checks passwords itself (first_statement needs Sluice
        # able to log in later), with the suites' one user; its pool is as large
        # as Connector/Python's largest pool in its tests (64 connections, each
        # taking its server connection at its first statement and keeping it).
        SL_SLUICE_USER=$MY_USER SL_SLUICE_PASSWORD=$MY_PASSWORD \
            sl_sluice_write_mysql_config "$cfg" "$SL_MY_HOST" "$SL_MY_PORT" \
            "session:session:20:$PORT_A" "tx:transaction:10:$PORT_B:5s" \
            "lazy:session:100:$PORT_C:5s:first_statement"
        sl_log "sluice config: $cfg"
        sl_sluice_start "$cfg" "$log" "$PORT_A" "$PORT_B" "$PORT_C"
        pid=$SL_SLUICE_PID
    fi
    SRV_HOST=$SL_MY_HOST SRV_PORT=$SL_MY_PORT
    suites_against "${PORT_A:-}" "${PORT_B:-}" "$pid" "$log" "$MYSQL_MODES" "$@"
}

# both_parts_at_once START: the PostgreSQL part and the MySQL part, each this
# script run again with the other part off (own setup, servers and sluice,
# results under $RESULTS/pg and $RESULTS/mysql), at the same time: each part spends
# most of its time waiting on round trips, so together they take little more
# than the longer one. Their logs are printed when both are done.
both_parts_at_once() {
    local start=$1 part rc=0 passed=0 failed=0 line p f
    local -a env_common=(DRIVER_SUITES_PARALLEL=0)
    [[ -z "${SL_SLUICE_BIN:-}" ]] || env_common+=("SLUICE_BIN=$SL_SLUICE_BIN")
    local -A pids=() slots=()
    for part in pg mysql; do
        local off=DRIVER_SUITES_MYSQL=0
        [[ "$part" == pg ]] || off=DRIVER_SUITES_PG=0
        mkdir -p "$RESULTS/$part"
        env "${env_common[@]}" "$off" "DRIVER_SUITES_RESULTS=$RESULTS/$part" \
            bash "$SCRIPT_DIR/driver-suites.sh" >"$RESULTS/$part.log" 2>&1 &
        pids[$part]=$!
        # (A part's own cleanup stops its suite, Sluice and servers: up to a minute.)
        slots[$part]=${#SL_CLEANUP[@]}
        sl_defer "sl_stop_pid ${pids[$part]} 120"
    done
    banner "PostgreSQL and MySQL parts at once (logs: $RESULTS/pg.log, $RESULTS/mysql.log)"
    for part in pg mysql; do
        wait "${pids[$part]}" || rc=1
        SL_CLEANUP[${slots[$part]}]=":"
        sl_log "$part part done after $((SECONDS - start))s"
    done
    for part in pg mysql; do
        banner "$part part: $RESULTS/$part.log"
        cat "$RESULTS/$part.log"
        line=$(grep -E '^driver-suites: [0-9]+ passed, [0-9]+ failed$' "$RESULTS/$part.log" | tail -n 1) ||
            line=""
        if [[ -z "$line" ]]; then
            failed=$((failed + 1))
            REPORT+=("FAIL  $part part: it ended without its summary line")
            continue
        fi
        read -r _ p _ f _ <<<"$line"
        passed=$((passed + p)) failed=$((failed + f))
    done
    banner "summary, both parts ($((SECONDS - start))s)"
    printf '%s\n' "${REPORT[@]}"
    grep -h -E '^(PASS|FAIL|INFO)  ' "$RESULTS/pg.log" "$RESULTS/mysql.log" || true
    echo "driver-suites: $passed passed, $failed failed"
    ((rc == 0 && failed == 0 && passed > 0))
}

main() {
    local start=$SECONDS suite
    check_modes DRIVER_SUITES_MODES "$MODES"
    check_modes DRIVER_SUITES_MYSQL_MODES "$MYSQL_MODES" lazy
    [[ "$PG_KIND" =~ ^(0|throwaway|existing)$ ]] ||
        sl_die "DRIVER_SUITES_PG must be 0, throwaway or existing, not $PG_KIND"
    [[ "$MYSQL_KIND" =~ ^(0|throwaway|existing)$ ]] ||
        sl_die "DRIVER_SUITES_MYSQL must be 0, throwaway or existing, not $MYSQL_KIND"
    local -a pg=() my=()
    [[ "$PG_KIND" == 0 ]] || mapfile -t pg < <(enabled_suites "${PG_SUITES[@]}")
    [[ "$MYSQL_KIND" == 0 ]] || mapfile -t my < <(enabled_suites "${MY_SUITES[@]}")
    ((${#pg[@]} + ${#my[@]})) || sl_die "every suite is turned off: nothing to run"
    rm -rf "$RESULTS"
    mkdir -p "$RESULTS"

    if [[ "$DIRECT_ONLY" != 1 ]]; then
        banner "build"
        sl_sluice_build
    fi

    if ((${#pg[@]} && ${#my[@]})) && [[ "${DRIVER_SUITES_PARALLEL:-1}" == 1 ]]; then
        both_parts_at_once "$start"
        return
    fi
    banner "setup"
    for suite in "${pg[@]}" "${my[@]}"; do
        sl_run "$SCRIPT_DIR/$suite-suite.sh" --setup-only
    done

    if ((${#pg[@]})); then
        pg_part "${pg[@]}"
    else
        sl_log "PostgreSQL suites skipped"
    fi
    if ((${#my[@]})); then
        mysql_part "${my[@]}"
    else
        sl_log "MySQL suites skipped"
    fi

    banner "summary ($((SECONDS - start))s)"
    printf '%s\n' "${REPORT[@]}"
    echo "passed / failed / skipped per suite and endpoint:"
    python3 "$SCRIPT_DIR/lib/outcomes.py" table "$RESULTS" "${pg[@]}" "${my[@]}"
    echo "results: $RESULTS"
    echo "driver-suites: $CHECKS_PASSED passed, $CHECKS_FAILED failed"
    ((CHECKS_FAILED == 0 && CHECKS_PASSED > 0))
}

main "$@"
