#!/usr/bin/env bash
# HandlerSocket lookups: Sluice's key-value path against the reference plugin
# and against SQL prepared point selects sent to the server directly.
#
#   scripts/bench-hs.sh [options]
#
#   --rounds N            rounds per target and connection count (default 3)
#   --duration S          measured seconds per run (default 8)
#   --warmup S            unmeasured seconds before each run's window (default 2)
#   --rows N              rows in bench.user (default 1000000); keys are drawn
#                         uniformly from 1..=N
#   --connections "LIST"  client connection counts (default "16 128")
#   --depths "LIST"       HandlerSocket requests in flight per connection
#                         (default "1 16")
#   --hs-connections N    Sluice's server connections for the listener
#                         ([handlersocket.hs] connections, default 4)
#   --bench-threads N     sluice-bench runtime threads (default 1)
#   --out FILE            also write the report here (default
#                         target/bench/hs-<timestamp>.md)
#
# Env: SLUICE_BIN=path and SLUICE_BENCH_BIN=path use prebuilt binaries; without
#      both, the script runs `cargo build --release -p sluice -p sluice-bench -j 1`.
#
# What it does:
#  1. starts a throwaway MariaDB (scripts/lib/mariadb.sh) on a free loopback
#     port with the reference HandlerSocket plugin loaded (--plugin-maturity=beta,
#     read listener on another free port, secrets set empty: no auth; the
#     plugin's thread settings are its defaults), 512 MB buffer pool;
#  2. creates bench.user (user_id INT UNSIGNED PRIMARY KEY, user_name,
#     user_email, created) and fills it with --rows rows from the SEQUENCE
#     engine in batches of 100,000, then ANALYZE TABLE;
#  3. starts Sluice with one [handlersocket.hs] read-only listener on that
#     server (logging in as root, --hs-connections server connections);
#  4. one unrecorded 2-second run per target (warm-up), then for each
#     connection count --rounds rounds of one run per target, in this order
#     (A B C A B C ...):
#       sql-direct     sluice-bench run --scenario point-select (prepared
#                      SELECT ... WHERE user_id = ?, one in flight) to the server
#       plugin-dD      sluice-bench run --scenario kv-lookup --depth D to the plugin
#       sluice-dD      the same to Sluice's listener
#     (plugin and Sluice alternate per depth: plugin-d1 sluice-d1 plugin-d16 ...);
#  5. reports per connection count and target the median lookups/s, its ratio
#     to sql-direct and to the plugin at the same depth, median p50/p99 latency,
#     Sluice's and the server's CPU time (utime+stime of all threads, from
#     /proc/PID/stat around each run, divided by every answer of the run,
#     warm-up included) per 1,000 lookups, and for Sluice the lookups per
#     SELECT statement it sent (answers / the server's Com_select delta).
#
# A run is an error if sluice-bench exits non-zero (any error answer, a broken
# connection, or nothing measured) or any lookup found no row. Everything started here stops at exit;
# all traffic stays on 127.0.0.1.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

CMDLINE="$(printf '%q ' "${BASH_SOURCE[0]#"$SL_ROOT/"}" "$@")"
CMDLINE="${CMDLINE% }"

ROUNDS=3
DURATION=8
WARMUP=2
ROWS=1000000
CONNECTIONS="16 128"
DEPTHS="1 16"
HS_CONNECTIONS=4
BENCH_THREADS=1
OUT=""

usage() { sed -n '2,51p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        --connections) CONNECTIONS=$2; shift 2 ;;
        --depths) DEPTHS=$2; shift 2 ;;
        --hs-connections) HS_CONNECTIONS=$2; shift 2 ;;
        --bench-threads) BENCH_THREADS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h | --help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
done
for n in "$ROUNDS" "$DURATION" "$ROWS" "$HS_CONNECTIONS" "$BENCH_THREADS"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || usage
done
[[ "$WARMUP" =~ ^[0-9]+$ ]] || usage
MAX_CONN=0
for c in $CONNECTIONS; do
    [[ "$c" =~ ^[1-9][0-9]*$ ]] || usage
    if ((c > MAX_CONN)); then MAX_CONN=$c; fi
done
((MAX_CONN > 0)) || usage
for d in $DEPTHS; do [[ "$d" =~ ^[1-9][0-9]*$ ]] || usage; done
[[ -n "$DEPTHS" ]] || usage

# Report order: sluice-pg-dD is Sluice's HandlerSocket over a PostgreSQL copy of the
# table (a throwaway PostgreSQL 15 on the same machine).
TARGETS="sql-direct"
for d in $DEPTHS; do TARGETS+=" plugin-d$d sluice-d$d sluice-pg-d$d"; done

CLK_TCK="$(getconf CLK_TCK)"
STAMP="$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$SL_ROOT/target/bench"
OUT="${OUT:-$SL_ROOT/target/bench/hs-$STAMP.md}"
RAW="${OUT%.md}.tsv"
DB=bench

n_targets=$(wc -w <<<"$TARGETS")
n_conns=$(wc -w <<<"$CONNECTIONS")
est=$(((n_conns * ROUNDS * (DURATION + WARMUP + 1) + WARMUP + 3) * n_targets))
LOAD_BEFORE="$(cut -d' ' -f1 /proc/loadavg)"
if awk -v l="$LOAD_BEFORE" 'BEGIN { exit !(l > 0.5) }'; then
    sl_log "WARNING: 1-min load average is $LOAD_BEFORE before starting; numbers will be noisy"
fi
sl_log "command: $CMDLINE"
sl_log "targets: $TARGETS; connections: $CONNECTIONS; $ROUNDS rounds x (${WARMUP}s + ${DURATION}s); about ${est}s of runs"

# --- binaries --------------------------------------------------------------------
if [[ -n "${SLUICE_BIN:-}" && -n "${SLUICE_BENCH_BIN:-}" ]]; then
    [[ -x "$SLUICE_BIN" && -x "$SLUICE_BENCH_BIN" ]] || sl_die "SLUICE_BIN or SLUICE_BENCH_BIN is not executable"
    SL_SLUICE_BIN=$SLUICE_BIN
    BENCH_BIN=$SLUICE_BENCH_BIN
    sl_log "using prebuilt $SL_SLUICE_BIN and $BENCH_BIN"
else
    sl_log "building: cargo build --release -p sluice -p sluice-bench -j 1"
    sl_run cargo build --manifest-path "$SL_ROOT/Cargo.toml" --release -p sluice -p sluice-bench -j 1 >&2 ||
        sl_die "cargo build failed"
    SL_SLUICE_BIN="$SL_ROOT/target/release/sluice"
    BENCH_BIN="$SL_ROOT/target/release/sluice-bench"
fi

# --- server with the reference plugin -----------------------------------------------
MY_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
# sluice-bench reads it from the environment (not from its command line).
export SLUICE_BENCH_PASSWORD=$MY_PASSWORD
PLUGIN_PORT="$(sl_free_port)"
PLUGIN_PORT_WR="$(sl_free_port)"
while [[ "$PLUGIN_PORT_WR" == "$PLUGIN_PORT" ]]; do PLUGIN_PORT_WR="$(sl_free_port)"; done
sl_hs_plugin_args "$PLUGIN_PORT" "$PLUGIN_PORT_WR"
sl_mariadb_start "$MY_PASSWORD" --innodb-buffer-pool-size=512M \
    --max-connections=$((MAX_CONN + 100)) "${SL_HS_ARGS[@]}"
sl_wait_port 127.0.0.1 "$PLUGIN_PORT" 30 "$SL_MY_PID" ||
    sl_die "the HandlerSocket plugin is not listening on 127.0.0.1:$PLUGIN_PORT"
PLUGIN_THREADS="$(sl_mariadb_admin -N -B -e "SELECT @@handlersocket_threads")"
sl_log "reference plugin on 127.0.0.1:$PLUGIN_PORT ($PLUGIN_THREADS threads)"

sl_log "filling $DB.user with $ROWS rows"
fill_start=$SECONDS
sl_mariadb_admin -e "CREATE DATABASE $DB;
CREATE TABLE $DB.user (
    user_id INT UNSIGNED NOT NULL PRIMARY KEY,
    user_name VARCHAR(50) NOT NULL,
    user_email VARCHAR(255) NOT NULL,
    created DATETIME NOT NULL
) ENGINE=InnoDB"
BATCH=100000
for ((lo = 1; lo <= ROWS; lo += BATCH)); do
    hi=$((lo + BATCH - 1 < ROWS ? lo + BATCH - 1 : ROWS))
    sl_mariadb_admin -D "$DB" -e "INSERT INTO $DB.user
        SELECT seq, CONCAT('user', seq), CONCAT('user', seq, '@example.com'),
               TIMESTAMP'2020-01-01 00:00:00' + INTERVAL (seq * 37) % 157680000 SECOND
        FROM seq_${lo}_to_${hi}" || sl_die "filling $DB.user failed at rows $lo..$hi"
done
sl_mariadb_admin -N -B -e "ANALYZE TABLE $DB.user" >/dev/null
count="$(sl_mariadb_admin -N -B -e "SELECT COUNT(*) FROM $DB.user")"
[[ "$count" == "$ROWS" ]] || sl_die "$DB.user has $count rows, not $ROWS"
FILL_SECONDS=$((SECONDS - fill_start))
sl_log "filled $ROWS rows in ${FILL_SECONDS}s"

# --- the same table on PostgreSQL -----------------------------------------------------
PG_PASSWORD="sluice-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
sl_pg_start_throwaway "$PG_PASSWORD" "max_connections = $((MAX_CONN + 100))"
sl_log "filling $DB.user on PostgreSQL"
SL_PG_ADMIN_DB=postgres sl_pg_admin -c "CREATE SCHEMA $DB;
CREATE TABLE $DB.\"user\" (
    user_id integer NOT NULL PRIMARY KEY,
    user_name varchar(50) NOT NULL,
    user_email varchar(255) NOT NULL,
    created timestamp(0) NOT NULL
);
INSERT INTO $DB.\"user\"
    SELECT g, 'user' || g, 'user' || g || '@example.com',
           TIMESTAMP '2020-01-01 00:00:00' + ((g * 37) % 157680000) * INTERVAL '1 second'
    FROM generate_series(1, $ROWS) g;" >/dev/null || sl_die "filling $DB.user on PostgreSQL failed"
SL_PG_ADMIN_DB=postgres sl_pg_admin -c "VACUUM ANALYZE $DB.\"user\"" >/dev/null ||
    sl_die "VACUUM ANALYZE $DB.user on PostgreSQL failed"

# --- Sluice ------------------------------------------------------------------------
SLUICE_DIR=""
sl_mktemp_dir SLUICE_DIR sluice-bench-hs
SLUICE_HS_PORT="$(sl_free_port)"
SLUICE_PG_PORT="$(sl_free_port)"
while [[ "$SLUICE_PG_PORT" == "$SLUICE_HS_PORT" ]]; do SLUICE_PG_PORT="$(sl_free_port)"; done
cat >"$SLUICE_DIR/sluice.toml" <<EOF
# generated by scripts/bench-hs.sh
[servers.my]
protocol = "mysql"
host = "$SL_MY_HOST"
port = $SL_MY_PORT

[clusters.my]
servers = ["my"]

[handlersocket.hs]
address = "127.0.0.1:$SLUICE_HS_PORT"
cluster = "my"
mode = "read-only"
user = "root"
password = "$MY_PASSWORD"
connections = $HS_CONNECTIONS

[servers.pg]
protocol = "postgres"
host = "$SL_PG_HOST"
port = $SL_PG_PORT

[clusters.pg]
servers = ["pg"]

[handlersocket.hspg]
address = "127.0.0.1:$SLUICE_PG_PORT"
cluster = "pg"
mode = "read-only"
user = "postgres"
password = "$PG_PASSWORD"
database = "postgres"
connections = $HS_CONNECTIONS
EOF
chmod 600 "$SLUICE_DIR/sluice.toml"
"$SL_SLUICE_BIN" check-config "$SLUICE_DIR/sluice.toml" >"$SLUICE_DIR/check.log" 2>&1 ||
    { cat "$SLUICE_DIR/check.log" >&2; sl_die "sluice check-config rejected the generated config"; }
sl_sluice_start "$SLUICE_DIR/sluice.toml" "$SLUICE_DIR/sluice.log" "$SLUICE_HS_PORT"

# --- runs ----------------------------------------------------------------------------
RUNLOG_DIR=""
sl_mktemp_dir RUNLOG_DIR sluice-bench-hs-logs
printf 'connections\ttarget\tround\tstatus\tops_per_sec\tp50_us\tp99_us\tanswered\tsluice_ticks\tserver_ticks\tselects\n' >"$RAW"

com_select() { sl_mariadb_admin -N -B -e "SHOW GLOBAL STATUS LIKE 'Com_select'" | awk '{print $2}'; }

# run_target TARGET CONNECTIONS: one sluice-bench run; sets R_STATUS, R_OPS,
# R_P50, R_P99, R_ANSWERED, R_SLUICE_TICKS, R_SERVER_TICKS, R_SELECTS.
run_target() {
    local t=$1 c=$2 rc=0 json="$RUNLOG_DIR/run.json" log="$RUNLOG_DIR/run.log"
    local -a what=()
    case "$t" in
        sql-direct) what=(--scenario point-select --protocol mysql --mode prepared --addr "127.0.0.1:$SL_MY_PORT" --user root --key-column user_id) ;;
        plugin-d*) what=(--scenario kv-lookup --addr "127.0.0.1:$PLUGIN_PORT" --depth "${t#plugin-d}") ;;
        sluice-d*) what=(--scenario kv-lookup --addr "127.0.0.1:$SLUICE_HS_PORT" --depth "${t#sluice-d}") ;;
        sluice-pg-d*) what=(--scenario kv-lookup --addr "127.0.0.1:$SLUICE_PG_PORT" --depth "${t#sluice-pg-d}") ;;
        *) sl_die "unknown target $t" ;;
    esac
    local s0 s1 m0 m1 q0 q1
    kill -0 "$SL_SLUICE_PID" 2>/dev/null || sl_die "sluice (pid $SL_SLUICE_PID) is no longer running"
    q0="$(com_select)"
    s0="$(sl_proc_cpu_ticks "$SL_SLUICE_PID")"
    m0="$(sl_proc_cpu_ticks "$SL_MY_PID")"
    rm -f "$json"
    sl_run timeout --kill-after=5 $((WARMUP + DURATION + 60)) \
        "$BENCH_BIN" run "${what[@]}" --table user --columns user_id,user_name,user_email,created --db "$DB" --connections "$c" --keys "$ROWS" \
        --warmup "$WARMUP" --duration "$DURATION" --threads "$BENCH_THREADS" \
        --seed "$RANDOM" --json "$json" >"$log" 2>&1 || rc=$?
    s1="$(sl_proc_cpu_ticks "$SL_SLUICE_PID")"
    m1="$(sl_proc_cpu_ticks "$SL_MY_PID")"
    q1="$(com_select)"
    kill -0 "$SL_SLUICE_PID" 2>/dev/null || sl_die "sluice died during the run"
    R_STATUS=error R_OPS=- R_P50=- R_P99=- R_ANSWERED=- R_SLUICE_TICKS=- R_SERVER_TICKS=$((m1 - m0)) R_SELECTS=-
    if ((rc == 0)) && [[ -s "$json" ]]; then
        local misses
        read -r R_OPS R_P50 R_P99 R_ANSWERED misses < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["summary"]
print("%.1f" % r["ops_per_sec"], r["latency_us"]["p50"], r["latency_us"]["p99"], r["answered"], r["misses"])' "$json")
        if [[ "$misses" == 0 ]]; then
            R_STATUS=ok
        else
            # Every key in 1..ROWS exists: a lookup without a row is wrong.
            R_OPS=- R_P50=- R_P99=- R_ANSWERED=-
            cp "$log" "${RAW%.tsv}-error-$t-$c.log"
            sl_log "  $t connections=$c: $misses lookups found no row"
        fi
    else
        cp "$log" "${RAW%.tsv}-error-$t-$c.log"
        sl_log "  $t connections=$c failed (rc $rc): $(tail -n 1 "$log")"
    fi
    if [[ "$t" == sluice-* ]]; then
        R_SLUICE_TICKS=$((s1 - s0))
        R_SELECTS=$((q1 - q0))
    fi
    if [[ "$t" == sluice-pg-* ]]; then
        # The MariaDB counters say nothing about PostgreSQL's work.
        R_SERVER_TICKS=- R_SELECTS=-
    fi
}

# One unrecorded short run per target first, at the first connection count:
# it warms the buffer pool and every target's caches. (Sluice's table cache is
# filled by the first index opens; connections that opened the index in the
# same instant as others can end up with separate table entries, and requests
# of separate entries are never grouped together, so a first run can batch
# nothing.)
WARM_CONN=${CONNECTIONS%% *}
sl_log "warm-up: one ${WARMUP}s+2s run per target at $WARM_CONN connections (not recorded)"
for t in $TARGETS; do
    DURATION_SAVED=$DURATION
    DURATION=2
    run_target "$t" "$WARM_CONN"
    DURATION=$DURATION_SAVED
    [[ "$R_STATUS" == ok ]] || sl_log "  warm-up of $t failed"
done

for c in $CONNECTIONS; do
    for ((r = 1; r <= ROUNDS; r++)); do
        for t in $TARGETS; do
            run_target "$t" "$c"
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$t" "$r" "$R_STATUS" "$R_OPS" \
                "$R_P50" "$R_P99" "$R_ANSWERED" "$R_SLUICE_TICKS" "$R_SERVER_TICKS" "$R_SELECTS" >>"$RAW"
            sl_log "connections=$c round $r/$ROUNDS $t: $R_STATUS lookups/s=$R_OPS p50=${R_P50}us p99=${R_P99}us sluice_ticks=$R_SLUICE_TICKS server_ticks=$R_SERVER_TICKS selects=$R_SELECTS"
        done
    done
done

# --- report ----------------------------------------------------------------------------
{
    echo "## HandlerSocket lookups, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$CMDLINE\`"
    echo
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM"
    echo "- server: MariaDB $SL_MY_VERSION (throwaway, 127.0.0.1), 512 MB buffer pool; reference HandlerSocket plugin with handlersocket_threads = $PLUGIN_THREADS"
    echo "- table: $DB.user, $ROWS rows (filled in ${FILL_SECONDS}s); keys uniform over 1..$ROWS"
    rev="$(git -C "$SL_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$SL_ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
    echo "- sluice: $SL_SLUICE_BIN (tree at $rev), [handlersocket.hs] read-only, connections = $HS_CONNECTIONS"
    echo "- load generator: sluice-bench, $BENCH_THREADS runtime thread(s); ${WARMUP}s warm-up + ${DURATION}s measured per run, $ROUNDS rounds alternating ($TARGETS) after one unrecorded 2s run per target"
    echo "- 1-min load average before the first run: $LOAD_BEFORE; everything shares the same $(nproc) cores, unpinned"
    echo
    python3 "$SCRIPT_DIR/lib/bench_hs_report.py" "$RAW" "$CLK_TCK" "$TARGETS" "$CONNECTIONS"
    echo
    echo "Raw results: \`${RAW#"$SL_ROOT/"}\`"
} >"$OUT"

echo
cat "$OUT"
echo
sl_log "report written to $OUT"
