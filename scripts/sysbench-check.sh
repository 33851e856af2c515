#!/usr/bin/env bash
# sysbench through Sluice's MySQL listeners: a short correctness check (not a
# benchmark; see scripts/bench-mysql.sh for that).
#
#   scripts/sysbench-check.sh
#
# 1. builds sluice (cargo build --release -p sluice -j 2) unless SLUICE_BIN;
# 2. starts a throwaway MariaDB (scripts/lib/mariadb.sh) and sluice with two
#    MySQL listeners in front of it: session mode (pool 20) and transaction
#    mode (pool 4, wait_timeout 5s, so that a client that cannot get a
#    server connection fails in seconds instead of hanging);
# 3. sysbench oltp_read_write prepare --tables=2 --table-size=1000 (database
#    sbtest), directly against the server;
# 4. runs, 8 threads for 5 s each, directly, through the session listener and
#    through the transaction listener:
#      rw   oltp_read_write (sysbench's default --db-ps-mode=auto: server-side
#           prepared statements, binary protocol)
#      text oltp_point_select --db-ps-mode=disable (text protocol)
#      zrw  oltp_read_write --mysql-compression=on (the compressed protocol
#           between sysbench and Sluice; through Sluice only)
# 5. checks every run: sysbench exits 0 (any error other than the ones
#    sysbench ignores by default, deadlock 1213 / 1020 / lock wait timeout
#    1205, is fatal to it), no reconnects, "ignored errors" equal to the
#    deadlocks the server counted meanwhile (Innodb_deadlocks; 0 for text),
#    and the query counts add up: text reads = transactions, no writes; rw
#    reads = 14 x (transactions + ignored errors), other (BEGIN/COMMIT) =
#    2 x transactions + ignored errors, 4 x transactions <= writes <=
#    4 x transactions + 3 x ignored errors, total = read + write + other.
#    Sluice must still be running after each run.
#
# Direct, session and transaction-mode runs are all the check (8 clients on
# a transaction pool of 4 connections); SYSBENCH_CHECK_TX_STRICT=0 reports
# transaction-mode runs without counting them. The last lines are a one-line summary and
# "sysbench-check: N passed, N failed". About 45 s on 2 cores, plus the
# build (nothing to do after scripts/driver-suites.sh).
#
# Env:
#   SYSBENCH_CHECK_TIME       seconds per run (default 5)
#   SYSBENCH_CHECK_THREADS    sysbench threads (default 8)
#   SYSBENCH_CHECK_TX=0       skip the transaction-mode runs
#   SYSBENCH_CHECK_TX_STRICT=0  transaction-mode failures do not fail the check
#   SYSBENCH_CHECK_RESULTS    where logs go (default target/sysbench-check)
#   SLUICE_BIN                use this sluice binary instead of building
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

TIME="${SYSBENCH_CHECK_TIME:-5}"
THREADS="${SYSBENCH_CHECK_THREADS:-8}"
WITH_TX="${SYSBENCH_CHECK_TX:-1}"
TX_STRICT="${SYSBENCH_CHECK_TX_STRICT:-1}"
RESULTS="${SYSBENCH_CHECK_RESULTS:-$SL_ROOT/target/sysbench-check}"
DB=sbtest
[[ "$TIME" =~ ^[1-9][0-9]*$ && "$THREADS" =~ ^[1-9][0-9]*$ ]] ||
    sl_die "SYSBENCH_CHECK_TIME and SYSBENCH_CHECK_THREADS must be positive integers"

sl_require_cmd sysbench sysbench

PASSED=0
FAILED=0
declare -a SUMMARY=()

# deadlocks: the server's Innodb_deadlocks counter.
deadlocks() {
    sl_mariadb_admin -N -B -e "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'" | awk '{print $2}'
}

# sb_stat LOG LABEL: the first number after "LABEL:" in sysbench's output.
sb_stat() {
    sed -n "s/^ *$2: *\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1
}

# sb_run TARGET PORT WORKLOAD: one sysbench run, checked. Sets R_OK (1 or 0),
# R_LINE (one line: numbers or what went wrong), R_DETAIL (sysbench's first
# error messages, if any), R_TPS and R_QPS.
sb_run() {
    local target=$1 port=$2 workload=$3
    local log="$RESULTS/$target-$workload.log" rc=0 d0 d1
    local -a args=()
    case "$workload" in
        rw) args=(oltp_read_write) ;;
        text) args=(oltp_point_select --db-ps-mode=disable) ;;
        zrw) args=(oltp_read_write --mysql-compression=on) ;;
    esac
    d0="$(deadlocks)"
    # sysbench gives up on threads that cannot connect only after 30 s;
    # the timeout keeps a stuck run from eating the time budget.
    sl_run timeout --kill-after=5 $((TIME + 15)) sysbench "${args[@]}" "${SB_COMMON[@]}" \
        --mysql-port="$port" --threads="$THREADS" --time="$TIME" run >"$log" 2>&1 || rc=$?
    d1="$(deadlocks)"
    local read write other total txns tps qps ign reconn
    read="$(sb_stat "$log" read)" write="$(sb_stat "$log" write)" other="$(sb_stat "$log" other)"
    total="$(sb_stat "$log" total)" txns="$(sb_stat "$log" transactions)"
    ign="$(sb_stat "$log" "ignored errors")" reconn="$(sb_stat "$log" reconnects)"
    tps="$(sed -n 's/^ *transactions: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' "$log")"
    qps="$(sed -n 's/^ *queries: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' "$log")"
    local -a bad=()
    R_DETAIL=""
    if ((rc != 0)); then
        if ((rc == 124 || rc == 137)); then
            bad+=("timed out after $((TIME + 15))s")
        else
            bad+=("exit status $rc")
        fi
    fi
    if [[ -z "$read" || -z "$write" || -z "$other" || -z "$total" || -z "$txns" || -z "$ign" || -z "$reconn" ]]; then
        bad+=("no statistics in the output")
    else
        ((reconn == 0)) || bad+=("$reconn reconnects")
        ((ign == d1 - d0)) || bad+=("$ign ignored errors but $((d1 - d0)) server deadlocks")
        ((total == read + write + other)) || bad+=("total $total != read+write+other")
        ((txns > 0)) || bad+=("no transactions")
        case "$workload" in
            text)
                ((read == txns)) || bad+=("read $read != transactions $txns")
                ((write == 0 && other == 0)) || bad+=("write $write, other $other (expected 0)")
                ((ign == 0)) || bad+=("$ign ignored errors")
                ;;
            rw | zrw)
                ((read == 14 * (txns + ign))) || bad+=("read $read != 14 x (transactions + ignored) = $((14 * (txns + ign)))")
                ((other == 2 * txns + ign)) || bad+=("other $other != 2 x transactions + ignored = $((2 * txns + ign))")
                ((write >= 4 * txns && write <= 4 * txns + 3 * ign)) ||
                    bad+=("write $write outside [4 x transactions, + 3 x ignored] = [$((4 * txns)), $((4 * txns + 3 * ign))]")
                ;;
        esac
    fi
    if [[ -n "${SLUICE_PID:-}" && "$target" != direct ]] && ! kill -0 "$SLUICE_PID" 2>/dev/null; then
        bad+=("sluice (pid $SLUICE_PID) died")
    fi
    if ((${#bad[@]} == 0)); then
        R_OK=1
        R_LINE="ok    $(printf '%-12s %-5s' "$target" "$workload") tps ${tps:-?}, qps ${qps:-?}, transactions $txns, read/write/other $read/$write/$other, ignored errors $ign (= server deadlocks), reconnects 0"
    else
        R_OK=0
        local why
        why="$(printf '%s; ' "${bad[@]}")"
        R_LINE="FAIL  $(printf '%-12s %-5s' "$target" "$workload") ${why%; } (log: $log)"
        R_DETAIL="$(grep -m 2 -E 'FATAL|ERROR|error' "$log" | tr '\n' ' ' || true)"
    fi
    R_TPS=${tps:-}
    R_QPS=${qps:-}
}

main() {
    local start=$SECONDS build_s
    rm -rf "$RESULTS"
    mkdir -p "$RESULTS"
    sl_sluice_build
    build_s=$((SECONDS - start))
    start=$SECONDS

    local password
    password="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    sl_mariadb_start "$password"
    sl_mariadb_admin -e "CREATE DATABASE $DB"

    local session_port tx_port cfg="$RESULTS/sluice.toml"
    session_port="$(sl_free_port)"
    tx_port="$(sl_free_port)"
    while [[ "$tx_port" == "$session_port" ]]; do tx_port="$(sl_free_port)"; done
    sl_sluice_write_mysql_config "$cfg" "$SL_MY_HOST" "$SL_MY_PORT" \
        "session:session:20:$session_port" "tx:transaction:4:$tx_port:5s"
    sl_sluice_start "$cfg" "$RESULTS/sluice.log" "$session_port" "$tx_port"
    SLUICE_PID=$SL_SLUICE_PID

    SB_COMMON=(--mysql-host=127.0.0.1 --mysql-user=root --mysql-password="$password"
        --mysql-db="$DB" --tables=2 --table-size=1000)
    sl_log "sysbench $(sysbench --version | awk '{print $2}'): prepare --tables=2 --table-size=1000 (direct)"
    sl_run sysbench oltp_read_write "${SB_COMMON[@]}" --mysql-port="$SL_MY_PORT" prepare \
        >"$RESULTS/prepare.log" 2>&1 || { tail -n 20 "$RESULTS/prepare.log" >&2; sl_die "sysbench prepare failed"; }

    local -a targets=("direct:$SL_MY_PORT" "session:$session_port")
    [[ "$WITH_TX" == 0 ]] || targets+=("transaction:$tx_port")
    local spec target port workload
    declare -A tps=()
    for spec in "${targets[@]}"; do
        target=${spec%%:*} port=${spec#*:}
        local -a workloads=(rw text)
        [[ "$target" == direct ]] || workloads+=(zrw)
        for workload in "${workloads[@]}"; do
            sl_log "sysbench $workload via $target (127.0.0.1:$port), $THREADS threads, ${TIME}s"
            sb_run "$target" "$port" "$workload"
            if [[ "$target" == transaction ]]; then
                if [[ "$TX_STRICT" == 1 ]]; then
                    if ((R_OK)); then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
                fi
                if [[ "$TX_STRICT" == 1 ]]; then
                    SUMMARY+=("$R_LINE  [transaction mode: strict]")
                else
                    SUMMARY+=("$R_LINE  [transaction mode: informational, not counted]")
                fi
                [[ -z "$R_DETAIL" ]] || SUMMARY+=("      sysbench: $R_DETAIL")
            else
                if ((R_OK)); then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
                SUMMARY+=("$R_LINE")
                [[ -z "$R_DETAIL" ]] || SUMMARY+=("      sysbench: $R_DETAIL")
            fi
            if ((R_OK)); then
                if [[ "$workload" == *rw ]]; then tps[$target-$workload]="$R_TPS tps"; else tps[$target-$workload]="$R_QPS qps"; fi
            else
                tps[$target-$workload]=FAILED
            fi
        done
    done

    printf '\n=== sysbench check (%ss, plus %ss to build sluice) ===\n' "$((SECONDS - start))" "$build_s"
    printf '%s\n' "${SUMMARY[@]}"
    echo "logs: $RESULTS"
    local line="summary: direct rw ${tps[direct-rw]}, text ${tps[direct-text]} | session rw ${tps[session-rw]}, text ${tps[session-text]}, compressed rw ${tps[session-zrw]}"
    if [[ "$WITH_TX" != 0 ]]; then
        line+=" | transaction: rw ${tps[transaction-rw]}, text ${tps[transaction-text]}, compressed rw ${tps[transaction-zrw]}"
    fi
    echo "$line"
    echo "sysbench-check: $PASSED passed, $FAILED failed"
    ((FAILED == 0))
}

main "$@"
