#!/usr/bin/env bash
# pgbench -S (select-only) through Sluice vs PgBouncer vs the server directly.
#
#   scripts/bench-pgbench.sh [options]
#
#   --rounds N          rounds per target and client count (default 5)
#   --duration S        seconds per pgbench run (default 10)
#   --clients "LIST"    client counts (default "1 16 128")
#   --mode M            pgbench -M: simple | extended | prepared (default simple)
#   --scale N           pgbench -i scale (default 10)
#   --server KIND       throwaway (default): a temp PostgreSQL 15 cluster on a
#                       free loopback port, scram auth, max_connections 300;
#                       existing: 127.0.0.1:5432 as postgres (no password;
#                       override with PGBENCH_PG_HOST/PORT/USER/PASSWORD),
#                       database sluice_bench (created, dropped at exit);
#                       needs max_connections above the largest client count
#   --auth A            client auth of the throwaway server and the proxies:
#                       trust (default; connection setup then costs nothing
#                       and the CPU numbers are per-query only) or scram
#                       (scram-sha-256 with a random password)
#   --pin-cpu N         pin the server, the proxies and pgbench to CPU N (throwaway
#                       server only). On this KVM machine a query whose client
#                       and server sit on different vCPUs pays ~100 us of
#                       cross-CPU wakeup latency, so unpinned 1-client numbers
#                       mostly measure scheduler placement; pinned, they
#                       measure CPU cost per query (added latency = proxy cost)
#   --out FILE          also write the report here (default
#                       target/bench/pgbench-<timestamp>.md)
#
# Env: SLUICE=0 leaves Sluice out (no build): direct and PgBouncer only.
#      SLUICE_BIN=path uses a prebuilt sluice instead of building.
#      SLUICE_BUSY_POLL_US=N sets busy_poll_us in Sluice's generated config.
#
# Targets: direct; sluice (transaction-mode pool of 20, generated config);
# pgbouncer (Debian package, transaction mode, default_pool_size 20,
# max_client_conn 2000). Runs alternate A B C A B C ... per client count, each
# target gets one unrecorded warm-up run first. The proxies' CPU time is read
# from /proc/PID/stat (utime+stime) before and after each run and divided by
# the transactions pgbench reports (-S: one query per transaction).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
sl_init_cleanup

CMDLINE="$(printf '%q ' "${BASH_SOURCE[0]#"$SL_ROOT/"}" "$@")"
CMDLINE="${CMDLINE% }"
[[ -z "${SLUICE+x}" ]] || CMDLINE="SLUICE=$SLUICE $CMDLINE"
[[ -z "${SLUICE_BUSY_POLL_US:-}" ]] || CMDLINE="SLUICE_BUSY_POLL_US=$SLUICE_BUSY_POLL_US $CMDLINE"

ROUNDS=5
DURATION=10
CLIENTS="1 16 128"
MODE=simple
SCALE=10
SERVER=throwaway
AUTH=trust
PIN_CPU=""
OUT=""

usage() { sed -n '2,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --clients) CLIENTS=$2; shift 2 ;;
        --mode) MODE=$2; shift 2 ;;
        --scale) SCALE=$2; shift 2 ;;
        --server) SERVER=$2; shift 2 ;;
        --auth) AUTH=$2; shift 2 ;;
        --pin-cpu) PIN_CPU=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ && "$DURATION" =~ ^[1-9][0-9]*$ && "$SCALE" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$MODE" =~ ^(simple|extended|prepared)$ ]] || usage
[[ "$SERVER" =~ ^(throwaway|existing)$ ]] || usage
[[ "$AUTH" =~ ^(trust|scram)$ ]] || usage
if [[ -n "$PIN_CPU" ]]; then
    [[ "$PIN_CPU" =~ ^[0-9]+$ && "$PIN_CPU" -lt "$(nproc)" ]] || usage
    [[ "$SERVER" == throwaway ]] || { echo "--pin-cpu needs --server throwaway" >&2; exit 2; }
fi
for c in $CLIENTS; do [[ "$c" =~ ^[1-9][0-9]*$ ]] || usage; done

TARGETS="direct"
[[ "${SLUICE:-1}" == 0 ]] || TARGETS+=" sluice"
TARGETS+=" pgbouncer"

NPROC="$(nproc)"
CLK_TCK="$(getconf CLK_TCK)"
STAMP="$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$SL_ROOT/target/bench"
OUT="${OUT:-$SL_ROOT/target/bench/pgbench-$STAMP.md}"
RAW="${OUT%.md}.tsv"
DB=bench

sl_require_cmd pgbench postgresql-client
sl_require_cmd pgbouncer pgbouncer

n_targets=$(wc -w <<<"$TARGETS")
n_clients=$(wc -w <<<"$CLIENTS")
est=$(( (n_clients * ROUNDS + 1) * n_targets * (DURATION + 2) ))
LOAD_BEFORE="$(cut -d' ' -f1 /proc/loadavg)"
if awk -v l="$LOAD_BEFORE" 'BEGIN { exit !(l > 0.5) }'; then
    sl_log "WARNING: 1-min load average is $LOAD_BEFORE before starting; numbers will be noisy"
fi
sl_log "command: $CMDLINE"
sl_log "targets: $TARGETS; clients: $CLIENTS; $ROUNDS rounds x ${DURATION}s; -M $MODE; estimated ${est}s of runs"

# --- server ------------------------------------------------------------------
if [[ "$SERVER" == existing ]]; then
    SL_PG_HOST="${PGBENCH_PG_HOST:-127.0.0.1}"
    SL_PG_PORT="${PGBENCH_PG_PORT:-5432}"
    PG_USER="${PGBENCH_PG_USER:-postgres}"
    PG_PASSWORD="${PGBENCH_PG_PASSWORD:-}"
    SL_PG_USER=$PG_USER
    DB=sluice_bench
    export PGPASSWORD="$PG_PASSWORD"
    sl_pg_admin -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
    sl_defer "PGPASSWORD='$PG_PASSWORD' psql -X -q -h '$SL_PG_HOST' -p '$SL_PG_PORT' -U '$PG_USER' -d postgres -c 'DROP DATABASE IF EXISTS $DB'"
else
    sl_require_cmd "$SL_PGBIN/initdb" postgresql
    PG_USER=postgres
    PG_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    SL_PG_HOST_AUTH=scram-sha-256
    if [[ "$AUTH" == trust ]]; then
        SL_PG_HOST_AUTH=trust
    fi
    sl_pg_start_throwaway "$PG_PASSWORD"
    # With trust, the proxies trust their clients too (PgBouncer: an empty
    # password selects auth_type = trust).
    [[ "$AUTH" == scram ]] || PG_PASSWORD=""
    sl_pg_admin -c "CREATE DATABASE $DB"
fi
export PGPASSWORD="$PG_PASSWORD" PGUSER="$PG_USER" PGDATABASE="$DB"
unset PGHOST PGPORT PGOPTIONS PGSERVICE
PG_VERSION="$(sl_pg_admin -tAc 'show server_version')"

# pin PID...: with --pin-cpu, pin every thread of each PID to that CPU.
# Backends forked later inherit the postmaster's affinity.
pin() {
    local p
    [[ -n "$PIN_CPU" ]] || return 0
    for p in "$@"; do
        taskset -apc "$PIN_CPU" "$p" >/dev/null || sl_die "taskset failed for pid $p"
    done
}
PGBENCH_PREFIX=()
if [[ -n "$PIN_CPU" ]]; then
    PGBENCH_PREFIX=(taskset -c "$PIN_CPU")
    postmaster="$(head -n1 "$SL_PG_DIR/data/postmaster.pid")"
    # shellcheck disable=SC2046
    pin "$postmaster" $(pgrep -P "$postmaster")
    sl_log "pinned server, proxies and pgbench to CPU $PIN_CPU"
fi

sl_log "pgbench -i -s $SCALE on $SL_PG_HOST:$SL_PG_PORT/$DB"
pgbench -i -q -s "$SCALE" -h "$SL_PG_HOST" -p "$SL_PG_PORT" >/dev/null 2>&1 ||
    sl_die "pgbench -i failed"
psql -X -q -h "$SL_PG_HOST" -p "$SL_PG_PORT" -c "VACUUM ANALYZE" || sl_die "VACUUM failed"

# --- proxies -----------------------------------------------------------------
declare -A PORT PID
PORT[direct]=$SL_PG_PORT
PID[direct]=""

if [[ " $TARGETS " == *" sluice "* ]]; then
    sl_sluice_build
    SLUICE_DIR=""
    sl_mktemp_dir SLUICE_DIR sluice-bench
    SLUICE_PORT="$(sl_free_port)"
    sl_sluice_write_config "$SLUICE_DIR/sluice.toml" "$SL_PG_HOST" "$SL_PG_PORT" "tx:transaction:20:$SLUICE_PORT"
    sl_sluice_start "$SLUICE_DIR/sluice.toml" "$SLUICE_DIR/sluice.log" "$SLUICE_PORT"
    PORT[sluice]=$SLUICE_PORT
    PID[sluice]=$SL_SLUICE_PID
fi
sl_pgbouncer_start transaction "$SL_PG_HOST" "$SL_PG_PORT" "$PG_USER" "$PG_PASSWORD" 20 2000
PORT[pgbouncer]=$SL_PGB_PORT
PID[pgbouncer]=$SL_PGB_PID
pin "${PID[pgbouncer]}"
[[ -z "${PID[sluice]:-}" ]] || pin "${PID[sluice]}"

# --- runs ----------------------------------------------------------------------
RUNLOG_DIR=""
sl_mktemp_dir RUNLOG_DIR sluice-bench-logs
printf 'clients\ttarget\tround\tstatus\ttps\tlatency_ms\ttxns\tcpu_ticks\n' >"$RAW"

# bench_run TARGET CLIENTS DURATION: one pgbench run; sets R_STATUS (ok or
# error), R_TPS, R_LAT (ms), R_TXNS and R_TICKS (proxy CPU ticks, "-" for
# direct). Not a $(...) helper, so that a signal stops the run at once.
bench_run() {
    local t=$1 c=$2 d=$3 j log pid before=- after=- rc=0
    j=$((c < NPROC ? c : NPROC))
    log="$RUNLOG_DIR/run.log"
    pid=${PID[$t]}
    R_STATUS=error R_TPS=- R_LAT=- R_TXNS=- R_TICKS=-
    if [[ -n "$pid" ]]; then
        kill -0 "$pid" 2>/dev/null || sl_die "$t (pid $pid) is no longer running"
        before="$(sl_proc_cpu_ticks "$pid")"
    fi
    sl_run timeout $((d + 60)) "${PGBENCH_PREFIX[@]}" pgbench -n -S -M "$MODE" -c "$c" -j "$j" -T "$d" \
        -h 127.0.0.1 -p "${PORT[$t]}" >"$log" 2>&1 || rc=$?
    if [[ -n "$pid" ]]; then
        kill -0 "$pid" 2>/dev/null || sl_die "$t (pid $pid) died during the run"
        after="$(sl_proc_cpu_ticks "$pid")"
    fi
    local tps lat txns
    tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$log")"
    lat="$(sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p' "$log")"
    txns="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*$/\1/p' "$log")"
    if ((rc != 0)) || [[ -z "$tps" || -z "$lat" || -z "$txns" ]]; then
        cp "$log" "${RAW%.tsv}-error-$t-$c.log"
        sl_log "  $t c=$c: pgbench failed (rc $rc): $(grep -m1 -iE 'error|fatal|abort' "$log" || tail -n1 "$log")"
        return 0
    fi
    R_STATUS=ok R_TPS=$tps R_LAT=$lat R_TXNS=$txns
    [[ "$before" == - ]] || R_TICKS=$((after - before))
}

sl_log "warm-up: one short run per target at 16 clients (not recorded)"
for t in $TARGETS; do
    bench_run "$t" 16 "$((DURATION < 5 ? DURATION : 5))"
done

for c in $CLIENTS; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for t in $TARGETS; do
            bench_run "$t" "$c" "$DURATION"
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$t" "$r" "$R_STATUS" "$R_TPS" "$R_LAT" "$R_TXNS" "$R_TICKS" >>"$RAW"
            sl_log "c=$c round $r/$ROUNDS $t: $R_STATUS tps=$R_TPS lat=${R_LAT}ms txns=$R_TXNS cpu_ticks=$R_TICKS"
        done
    done
done

# --- report ----------------------------------------------------------------------
{
    echo "## pgbench -S, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$CMDLINE\`"
    echo
    echo "- machine: $NPROC cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
    echo "- server: PostgreSQL $PG_VERSION ($SERVER, 127.0.0.1), scale $SCALE, client auth $AUTH"
    if [[ -n "$PIN_CPU" ]]; then
        echo "- pinned: server, proxies and pgbench all on CPU $PIN_CPU"
    fi
    echo "- 1-min load average before the first run: $LOAD_BEFORE (other work on the machine makes the numbers noisy)"
    echo "- pgbench: $(pgbench --version | awk '{print $3}'), -S -M $MODE, -T $DURATION, -j min(clients, $NPROC), $ROUNDS rounds alternating ($TARGETS)"
    echo "- pgbouncer: $(pgbouncer --version | head -1 | awk '{print $2}'), transaction mode, default_pool_size 20, max_client_conn 2000"
    if [[ " $TARGETS " == *" sluice "* ]]; then
        rev="$(git -C "$SL_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$SL_ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
        if [[ -n "${SLUICE_BIN:-}" ]]; then
            echo "- sluice: prebuilt $SLUICE_BIN (not built from this tree, now at $rev), transaction-mode pool of 20"
        else
            echo "- sluice: release build of $rev, transaction-mode pool of 20"
        fi
    fi
    [[ -n "$PIN_CPU" ]] || echo "- everything (server, proxy, pgbench) shares the same $NPROC cores, unpinned"
    echo
    python3 "$SCRIPT_DIR/lib/bench_report.py" "$RAW" "$CLK_TCK" "$TARGETS" "$CLIENTS"
    echo
    echo "Raw results: \`${RAW#"$SL_ROOT/"}\`"
} >"$OUT"

echo
cat "$OUT"
echo
sl_log "report written to $OUT"
