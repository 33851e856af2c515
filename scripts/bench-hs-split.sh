#!/usr/bin/env bash
# Where the CPU goes per HandlerSocket lookup: the database server's, Sluice's and the
# load generator's CPU microseconds per lookup, and the share of the machine's CPU left
# idle, for the reference plugin inside MariaDB and for Sluice's key-value path over
# MariaDB and over PostgreSQL (128 connections, random primary-key lookups, 1 and 16 in
# flight per connection). benches/hs.toml measures throughput; bench-hs-floor.sh the
# server's cost alone; this shows how the two cores are shared out.
#
#   scripts/bench-hs-split.sh [ROWS] [SECONDS]
#       ROWS: table size (default 1000000); SECONDS: per run (default 8). Needs
#       target/release/sluice-bench and target/release/sluice (or SLUICE_BENCH_BIN,
#       SLUICE_BIN).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

rows=${1:-1000000} secs=${2:-8}
bench=${SLUICE_BENCH_BIN:-$SCRIPT_DIR/../target/release/sluice-bench}
SL_SLUICE_BIN=${SLUICE_BIN:-$SCRIPT_DIR/../target/release/sluice}
[[ -x "$bench" && -x "$SL_SLUICE_BIN" ]] ||
    sl_die "no $bench or $SL_SLUICE_BIN: cargo build --release -p sluice -p sluice-bench"
sl_require_cmd python3 python3

plugin=$(sl_free_port)
sl_hs_plugin_args "$plugin" "$((plugin + 1))"
sl_mariadb_start "" --max-connections=400 --innodb-buffer-pool-size=512M "${SL_HS_ARGS[@]}"
sl_wait_port 127.0.0.1 "$plugin" 30 || sl_die "the HandlerSocket plugin is not listening on $plugin"
sl_mariadb_admin -e "CREATE DATABASE IF NOT EXISTS bench"
"$bench" setup --protocol mysql --addr "127.0.0.1:$SL_MY_PORT" --keys "$rows" >&2
SL_PG_HOST_AUTH=trust sl_pg_start_throwaway ""
sl_pg_admin -c "CREATE DATABASE bench" >/dev/null
"$bench" setup --protocol pg --addr "127.0.0.1:$SL_PG_PORT" --keys "$rows" >&2
pg_pid=$(head -n 1 "$SL_PG_DIR/data/postmaster.pid")

sl_mktemp_dir dir sluice-hs-split
my_hs=$(sl_free_port) pg_hs=$(sl_free_port)
cat >"$dir/sluice.toml" <<EOF
[servers.my]
protocol = "mysql"
host = "127.0.0.1"
port = $SL_MY_PORT

[clusters.my]
servers = ["my"]

[servers.pg]
protocol = "postgres"
host = "127.0.0.1"
port = $SL_PG_PORT

[clusters.pg]
servers = ["pg"]

[handlersocket.my]
address = "127.0.0.1:$my_hs"
cluster = "my"
mode = "read-only"
user = "root"

[handlersocket.pg]
address = "127.0.0.1:$pg_hs"
cluster = "pg"
mode = "read-only"
user = "postgres"
database = "bench"
EOF
sl_sluice_start "$dir/sluice.toml" "$dir/sluice.log" "$my_hs" "$pg_hs"

# CPU ticks of a process and its children (PostgreSQL's backends are children of the
# postmaster; MariaDB's threads are counted in its own).
ticks() {
    local t=0 p
    for p in "$1" $(ps --ppid "$1" -o pid= 2>/dev/null); do
        t=$((t + $(sl_proc_cpu_ticks "$p" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
idle_ticks() { awk '/^cpu / {print $5}' /proc/stat; }
# Children's CPU seconds so far (the load generator runs as a child of this shell).
# (`times` must run in this shell, not in a pipeline's subshell.)
children_cpu() {
    times >"$dir/times"
    tail -n 1 "$dir/times" | awk '{split($0, t, /[ms ]+/); print t[1] * 60 + t[2] + t[3] * 60 + t[4]}'
}

printf '| target | depth | lookups/s | server µs | Sluice µs | generator µs | idle |\n'
printf '|---|--:|--:|--:|--:|--:|--:|\n'
for depth in 1 16; do
    for target in plugin sluice-mariadb sluice-pg; do
        case $target in
            plugin) addr=127.0.0.1:$plugin server=$SL_MY_PID db=bench ;;
            sluice-mariadb) addr=127.0.0.1:$my_hs server=$SL_MY_PID db=bench ;;
            sluice-pg) addr=127.0.0.1:$pg_hs server=$pg_pid db=public ;;
        esac
        s0=$(ticks "$server") l0=$(sl_proc_cpu_ticks "$SL_SLUICE_PID") i0=$(idle_ticks)
        children_cpu >"$dir/g0"
        "$bench" run --scenario kv-lookup --addr "$addr" --db "$db" --connections 128 \
            --depth "$depth" --duration "$secs" --warmup 0 --keys "$rows" \
            --json "$dir/run.json" >/dev/null
        s1=$(ticks "$server") l1=$(sl_proc_cpu_ticks "$SL_SLUICE_PID") i1=$(idle_ticks)
        children_cpu >"$dir/g1"
        [[ $target == plugin ]] && l1=$l0
        python3 - "$dir/run.json" "$target" "$depth" "$secs" "$(getconf CLK_TCK)" "$(nproc)" \
            "$((s1 - s0))" "$((l1 - l0))" "$((i1 - i0))" "$(cat "$dir/g0")" "$(cat "$dir/g1")" <<'EOF'
import json, sys
path, target, depth = sys.argv[1:4]
secs, hz, cores, server, sluice, idle = map(int, sys.argv[4:10])
gen = float(sys.argv[11]) - float(sys.argv[10])
ops = json.load(open(path))["summary"]["ops"]
us = lambda t: f"{t * 1e6 / hz / ops:.2f}"
sl = "—" if target == "plugin" else us(sluice)
print(f"| {target} | {depth} | {ops / secs:,.0f} | {us(server)} | {sl} | "
      f"{gen * 1e6 / ops:.2f} | {idle / hz / secs / cores:.0%} |")
EOF
    done
done
