#!/usr/bin/env bash
# sysbench through Sluice's MySQL listeners (session and transaction mode) vs
# the MariaDB server directly.
#
#   scripts/bench-mysql.sh [options]
#
#   --rounds N          rounds per target, workload and thread count (default 5)
#   --duration S        seconds per sysbench run (default 10)
#   --threads "LIST"    sysbench thread counts (default "1 16 128")
#   --workloads "LIST"  any of (default all three, in this order):
#                         point-text  oltp_point_select --db-ps-mode=disable
#                                     (text protocol, COM_QUERY)
#                         point-ps    oltp_point_select --db-ps-mode=auto
#                                     (server-side prepared statements,
#                                     COM_STMT_PREPARE once per thread, then
#                                     COM_STMT_EXECUTE)
#                         select1     "SELECT 1" per event (text protocol;
#                                     scripts/lib/select1.lua): the proxy's
#                                     per-query cost with no work on the server
#   --tables N          sysbench --tables for point selects (default 4)
#   --table-size N      sysbench --table-size (default 100000)
#   --tx-pool N         transaction-mode pool size (default 20)
#   --server KIND       throwaway (default): a temp MariaDB on a free loopback
#                       port (scripts/lib/mariadb.sh; root with a random
#                       password, mysql_native_password, max_connections
#                       sized for the largest thread count, 512 MB buffer
#                       pool); existing: 127.0.0.1:3306 as root (no
#                       password; override with BENCH_MYSQL_HOST/PORT/USER/
#                       PASSWORD), database sluice_bench (created, dropped at
#                       exit); needs max_connections above twice the largest
#                       thread count plus the transaction pool
#   --pin-cpu N         pin the server, Sluice and sysbench to CPU N
#                       (throwaway server only; see bench-pgbench.sh for why)
#   --out FILE          also write the report here (default
#                       target/bench/mysql-<timestamp>.md)
#
# Env: SLUICE=0 leaves Sluice out (no build): direct only.
#      SLUICE_BIN=path uses a prebuilt sluice instead of building.
#      SLUICE_BUSY_POLL_US=N sets busy_poll_us in Sluice's generated config.
#
# Targets: direct; sluice-session (session-mode pool as large as the largest
# thread count, so that no client waits); sluice-tx (transaction-mode pool of
# --tx-pool, wait_timeout 5s: a client that cannot get a server connection
# fails in seconds, and the run is recorded as an error). One sluice process
# serves both listeners (runs never overlap). Runs alternate A B C A B C ...
# per workload and thread count; each target gets one unrecorded warm-up run
# per workload first (16 threads, at most 5 s). Sluice's CPU time is read
# from /proc/PID/stat (utime+stime) before and after each run and divided by
# the queries sysbench reports (every workload: one query per event). A run
# counts as an error if sysbench exits non-zero, reports ignored errors or
# reconnects, or prints no statistics. The report gives median qps, the
# ratio to direct and Sluice CPU ms per 1,000 queries per workload, thread
# count and target, with the exact command line.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

CMDLINE="$(printf '%q ' "${BASH_SOURCE[0]#"$SL_ROOT/"}" "$@")"
CMDLINE="${CMDLINE% }"
[[ -z "${SLUICE+x}" ]] || CMDLINE="SLUICE=$SLUICE $CMDLINE"
[[ -z "${SLUICE_BUSY_POLL_US:-}" ]] || CMDLINE="SLUICE_BUSY_POLL_US=$SLUICE_BUSY_POLL_US $CMDLINE"

ROUNDS=5
DURATION=10
THREADS="1 16 128"
WORKLOADS="point-text point-ps select1"
TABLES=4
TABLE_SIZE=100000
TX_POOL=20
SERVER=throwaway
PIN_CPU=""
OUT=""

usage() { sed -n '2,52p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --workloads) WORKLOADS=$2; shift 2 ;;
        --tables) TABLES=$2; shift 2 ;;
        --table-size) TABLE_SIZE=$2; shift 2 ;;
        --tx-pool) TX_POOL=$2; shift 2 ;;
        --server) SERVER=$2; shift 2 ;;
        --pin-cpu) PIN_CPU=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$TABLES" "$TABLE_SIZE" "$TX_POOL"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || usage
done
[[ "$SERVER" =~ ^(throwaway|existing)$ ]] || usage
if [[ -n "$PIN_CPU" ]]; then
    [[ "$PIN_CPU" =~ ^[0-9]+$ && "$PIN_CPU" -lt "$(nproc)" ]] || usage
    [[ "$SERVER" == throwaway ]] || { echo "--pin-cpu needs --server throwaway" >&2; exit 2; }
fi
MAX_THREADS=0
for c in $THREADS; do
    [[ "$c" =~ ^[1-9][0-9]*$ ]] || usage
    if ((c > MAX_THREADS)); then MAX_THREADS=$c; fi
done
((MAX_THREADS > 0)) || usage
for w in $WORKLOADS; do
    [[ "$w" =~ ^(point-text|point-ps|select1)$ ]] || usage
done
[[ -n "$WORKLOADS" ]] || usage
# The session pool must hold every client at once, and the warm-up uses 16.
SESSION_POOL=$((MAX_THREADS > 16 ? MAX_THREADS : 16))

TARGETS="direct"
[[ "${SLUICE:-1}" == 0 ]] || TARGETS+=" sluice-session sluice-tx"

NPROC="$(nproc)"
CLK_TCK="$(getconf CLK_TCK)"
STAMP="$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$SL_ROOT/target/bench"
OUT="${OUT:-$SL_ROOT/target/bench/mysql-$STAMP.md}"
RAW="${OUT%.md}.tsv"
DB=sbtest

sl_require_cmd sysbench sysbench

n_targets=$(wc -w <<<"$TARGETS")
n_threads=$(wc -w <<<"$THREADS")
n_workloads=$(wc -w <<<"$WORKLOADS")
WARMUP=$((DURATION < 5 ? DURATION : 5))
est=$(((n_threads * ROUNDS * (DURATION + 1) + WARMUP + 1) * n_targets * n_workloads))
LOAD_BEFORE="$(cut -d' ' -f1 /proc/loadavg)"
if awk -v l="$LOAD_BEFORE" 'BEGIN { exit !(l > 0.5) }'; then
    sl_log "WARNING: 1-min load average is $LOAD_BEFORE before starting; numbers will be noisy"
fi
sl_log "command: $CMDLINE"
sl_log "targets: $TARGETS; workloads: $WORKLOADS; threads: $THREADS; $ROUNDS rounds x ${DURATION}s; estimated ${est}s of runs"

# --- server ------------------------------------------------------------------
if [[ "$SERVER" == existing ]]; then
    SL_MY_HOST="${BENCH_MYSQL_HOST:-127.0.0.1}"
    SL_MY_PORT="${BENCH_MYSQL_PORT:-3306}"
    SL_MY_USER="${BENCH_MYSQL_USER:-root}"
    SL_MY_PASSWORD="${BENCH_MYSQL_PASSWORD:-}"
    SL_MY_SOCKET=""
    MY_USER=$SL_MY_USER
    MY_PASSWORD=$SL_MY_PASSWORD
    DB=sluice_bench
    sl_mariadb_find_bins
    sl_mariadb_admin -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB" ||
        sl_die "cannot create database $DB on $SL_MY_HOST:$SL_MY_PORT"
    sl_defer "SL_MY_SOCKET='' sl_mariadb_admin -e 'DROP DATABASE IF EXISTS $DB'"
    MY_VERSION="$(sl_mariadb_admin -N -B -e 'SELECT VERSION()')"
else
    MY_USER=root
    MY_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    sl_mariadb_start "$MY_PASSWORD" --innodb-buffer-pool-size=512M \
        --max-connections=$((2 * SESSION_POOL + TX_POOL + 50))
    sl_mariadb_admin -e "CREATE DATABASE $DB"
    MY_VERSION=$SL_MY_VERSION
fi

# pin PID...: with --pin-cpu, pin every thread of each PID to that CPU.
# Threads created later inherit their creator's affinity.
pin() {
    local p
    [[ -n "$PIN_CPU" ]] || return 0
    for p in "$@"; do
        taskset -apc "$PIN_CPU" "$p" >/dev/null || sl_die "taskset failed for pid $p"
    done
}
SB_PREFIX=()
if [[ -n "$PIN_CPU" ]]; then
    SB_PREFIX=(taskset -c "$PIN_CPU")
    pin "$SL_MY_PID"
    sl_log "pinned server, Sluice and sysbench to CPU $PIN_CPU"
fi

SB_CONN=(--mysql-host=127.0.0.1 --mysql-user="$MY_USER" --mysql-password="$MY_PASSWORD" --mysql-db="$DB")
if [[ " $WORKLOADS " == *" point-"* ]]; then
    sl_log "sysbench oltp_point_select prepare --tables=$TABLES --table-size=$TABLE_SIZE on $SL_MY_HOST:$SL_MY_PORT/$DB"
    PREP_LOG=""
    sl_mktemp_dir PREP_LOG sluice-bench-prepare
    sl_run sysbench oltp_point_select "${SB_CONN[@]}" --mysql-host="$SL_MY_HOST" --mysql-port="$SL_MY_PORT" \
        --tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$((TABLES < NPROC ? TABLES : NPROC))" prepare \
        >"$PREP_LOG/prepare.log" 2>&1 || { tail -n 20 "$PREP_LOG/prepare.log" >&2; sl_die "sysbench prepare failed"; }
    sl_mariadb_admin -N -B -e "$(for ((i = 1; i <= TABLES; i++)); do printf 'ANALYZE TABLE %s.sbtest%d;' "$DB" "$i"; done)" \
        >/dev/null || sl_die "ANALYZE TABLE failed"
fi

# --- sluice ------------------------------------------------------------------
declare -A PORT PID
PORT[direct]=$SL_MY_PORT
PID[direct]=""

if [[ " $TARGETS " == *" sluice-session "* ]]; then
    sl_sluice_build
    SLUICE_DIR=""
    sl_mktemp_dir SLUICE_DIR sluice-bench
    PORT[sluice-session]="$(sl_free_port)"
    PORT[sluice-tx]="$(sl_free_port)"
    while [[ "${PORT[sluice-tx]}" == "${PORT[sluice-session]}" ]]; do PORT[sluice-tx]="$(sl_free_port)"; done
    sl_sluice_write_mysql_config "$SLUICE_DIR/sluice.toml" "$SL_MY_HOST" "$SL_MY_PORT" \
        "session:session:$SESSION_POOL:${PORT[sluice-session]}" "tx:transaction:$TX_POOL:${PORT[sluice-tx]}:5s"
    sl_sluice_start "$SLUICE_DIR/sluice.toml" "$SLUICE_DIR/sluice.log" "${PORT[sluice-session]}" "${PORT[sluice-tx]}"
    PID[sluice-session]=$SL_SLUICE_PID
    PID[sluice-tx]=$SL_SLUICE_PID
    pin "$SL_SLUICE_PID"
fi

# --- runs ----------------------------------------------------------------------
RUNLOG_DIR=""
sl_mktemp_dir RUNLOG_DIR sluice-bench-logs
printf 'workload\tthreads\ttarget\tround\tstatus\tqps\tlatency_ms\tqueries\tcpu_ticks\n' >"$RAW"

# bench_run WORKLOAD TARGET THREADS DURATION: one sysbench run; sets R_STATUS
# (ok or error), R_QPS, R_LAT (ms), R_QUERIES and R_TICKS (Sluice CPU ticks,
# "-" for direct). Not a $(...) helper, so that a signal stops the run at once.
bench_run() {
    local w=$1 t=$2 c=$3 d=$4 log pid before=- after=- rc=0
    local -a what=()
    case "$w" in
        point-text) what=(oltp_point_select --db-ps-mode=disable --tables="$TABLES" --table-size="$TABLE_SIZE") ;;
        point-ps) what=(oltp_point_select --db-ps-mode=auto --tables="$TABLES" --table-size="$TABLE_SIZE") ;;
        select1) what=("$SCRIPT_DIR/lib/select1.lua") ;;
    esac
    log="$RUNLOG_DIR/run.log"
    pid=${PID[$t]}
    R_STATUS=error R_QPS=- R_LAT=- R_QUERIES=- R_TICKS=-
    if [[ -n "$pid" ]]; then
        kill -0 "$pid" 2>/dev/null || sl_die "$t (pid $pid) is no longer running"
        before="$(sl_proc_cpu_ticks "$pid")"
    fi
    # sysbench waits 30 s for threads that cannot connect; the timeout is a
    # last resort.
    sl_run timeout --kill-after=5 $((d + 60)) "${SB_PREFIX[@]}" sysbench "${what[@]}" "${SB_CONN[@]}" \
        --mysql-port="${PORT[$t]}" --threads="$c" --time="$d" run >"$log" 2>&1 || rc=$?
    if [[ -n "$pid" ]]; then
        kill -0 "$pid" 2>/dev/null || sl_die "$t (pid $pid) died during the run"
        after="$(sl_proc_cpu_ticks "$pid")"
    fi
    local qps lat queries ign reconn
    qps="$(sed -n 's/^ *queries: *[0-9]* *(\([0-9.]*\) per sec.)$/\1/p' "$log")"
    queries="$(sed -n 's/^ *queries: *\([0-9]*\) .*$/\1/p' "$log")"
    # sysbench prints the average latency with two decimals only; the sum of
    # all events' latencies over the number of events is exact.
    lat="$(awk '/^ *total number of events:/ { n = $NF } /^ *sum:/ { s = $NF }
        END { if (n > 0 && s != "") printf "%.4f", s / n }' "$log")"
    ign="$(sed -n 's/^ *ignored errors: *\([0-9]*\) .*$/\1/p' "$log")"
    reconn="$(sed -n 's/^ *reconnects: *\([0-9]*\) .*$/\1/p' "$log")"
    if ((rc != 0)) || [[ -z "$qps" || -z "$lat" || -z "$queries" || "${ign:-x}" != 0 || "${reconn:-x}" != 0 ]]; then
        cp "$log" "${RAW%.tsv}-error-$w-$t-$c.log"
        sl_log "  $w $t threads=$c: sysbench failed (rc $rc, ignored errors ${ign:-?}, reconnects ${reconn:-?}): $(grep -m1 -E 'FATAL|error' "$log" || tail -n1 "$log")"
        return 0
    fi
    R_STATUS=ok R_QPS=$qps R_LAT=$lat R_QUERIES=$queries
    [[ "$before" == - ]] || R_TICKS=$((after - before))
}

for w in $WORKLOADS; do
    sl_log "warm-up $w: one ${WARMUP}s run per target at 16 threads (not recorded)"
    for t in $TARGETS; do
        bench_run "$w" "$t" 16 "$WARMUP"
    done
    for c in $THREADS; do
        for ((r = 1; r <= ROUNDS; r++)); do
            for t in $TARGETS; do
                bench_run "$w" "$t" "$c" "$DURATION"
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$c" "$t" "$r" "$R_STATUS" "$R_QPS" "$R_LAT" "$R_QUERIES" "$R_TICKS" >>"$RAW"
                sl_log "$w threads=$c round $r/$ROUNDS $t: $R_STATUS qps=$R_QPS lat=${R_LAT}ms queries=$R_QUERIES cpu_ticks=$R_TICKS"
            done
        done
    done
done

# --- report ----------------------------------------------------------------------
describe() {
    case "$1" in
        point-text) echo "\`oltp_point_select --db-ps-mode=disable\` (text protocol), --tables $TABLES --table-size $TABLE_SIZE" ;;
        point-ps) echo "\`oltp_point_select --db-ps-mode=auto\` (server-side prepared statements), --tables $TABLES --table-size $TABLE_SIZE" ;;
        select1) echo "\`SELECT 1\` per event (\`scripts/lib/select1.lua\`, text protocol)" ;;
    esac
}
{
    echo "## sysbench (MySQL protocol), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$CMDLINE\`"
    echo
    echo "- machine: $NPROC cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
    echo "- server: MariaDB $MY_VERSION ($SERVER, 127.0.0.1), user $MY_USER (mysql_native_password)"
    if [[ -n "$PIN_CPU" ]]; then
        echo "- pinned: server, Sluice and sysbench all on CPU $PIN_CPU"
    fi
    echo "- 1-min load average before the first run: $LOAD_BEFORE (other work on the machine makes the numbers noisy)"
    echo "- sysbench: $(sysbench --version | awk '{print $2}'), --time $DURATION, $ROUNDS rounds alternating ($TARGETS)"
    if [[ " $TARGETS " == *" sluice-session "* ]]; then
        rev="$(git -C "$SL_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$SL_ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
        if [[ -n "${SLUICE_BIN:-}" ]]; then
            echo "- sluice: prebuilt $SLUICE_BIN (not built from this tree, now at $rev)"
        else
            echo "- sluice: release build of $rev"
        fi
        echo "- sluice-session: session-mode pool of $SESSION_POOL; sluice-tx: transaction-mode pool of $TX_POOL, wait_timeout 5s; pass-through auth"
        echo "- sluice-tx: a run whose clients cannot all get a server connection within 5 s is an error row; plain text statements are pipelined on shared connections (pools.shared_connections, default 1)"
    fi
    [[ -n "$PIN_CPU" ]] || echo "- everything (server, Sluice, sysbench) shares the same $NPROC cores, unpinned"
    for w in $WORKLOADS; do
        echo
        echo "### $w: $(describe "$w")"
        echo
        awk -F'\t' -v w="$w" 'BEGIN { OFS = "\t" } NR == 1 { print "clients", "target", "round", "status", "tps", "latency_ms", "txns", "cpu_ticks"; next }
            $1 == w { print $2, $3, $4, $5, $6, $7, $8, $9 }' "$RAW" >"$RUNLOG_DIR/$w.tsv"
        python3 "$SCRIPT_DIR/lib/bench_report.py" "$RUNLOG_DIR/$w.tsv" "$CLK_TCK" "$TARGETS" "$THREADS" qps threads
    done
    echo
    echo "Raw results: \`${RAW#"$SL_ROOT/"}\`"
} >"$OUT"

echo
cat "$OUT"
echo
sl_log "report written to $OUT"
