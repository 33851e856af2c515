#!/usr/bin/env bash
# What one primary-key lookup costs the MariaDB server, in server CPU microseconds:
# as part of a grouped statement (`SELECT ... WHERE id IN (k1, ..., kn)`, the statement
# Sluice's HandlerSocket path sends), and through the reference HandlerSocket plugin.
# Only the server's own CPU time is counted (from /proc), so the load generator's and
# any proxy's cost are left out: this is the floor under any proxy that groups lookups
# into SQL, whatever the proxy does.
#
#   scripts/bench-hs-floor.sh [ROWS] [STATEMENTS]
#       ROWS: table size (default 1000000); STATEMENTS: statements per IN-list size
#       (default 2000). Needs target/release/sluice-bench (or SLUICE_BENCH_BIN).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/common.sh"
# shellcheck source=lib/mariadb.sh source-path=SCRIPTDIR
source "$SCRIPT_DIR/lib/mariadb.sh"
sl_init_cleanup

rows=${1:-1000000} stmts=${2:-2000}
bench=${SLUICE_BENCH_BIN:-$SCRIPT_DIR/../target/release/sluice-bench}
[[ -x "$bench" ]] || sl_die "no $bench: cargo build --release -p sluice-bench"
sl_require_cmd python3 python3

hs=$(sl_free_port)
sl_hs_plugin_args "$hs" "$((hs + 1))"
sl_mariadb_start "" --max-connections=400 --innodb-buffer-pool-size=512M "${SL_HS_ARGS[@]}"
sl_wait_port 127.0.0.1 "$hs" 30 || sl_die "the HandlerSocket plugin is not listening on $hs"
sl_mariadb_admin -e "CREATE DATABASE IF NOT EXISTS bench"
"$bench" setup --protocol mysql --addr "127.0.0.1:$SL_MY_PORT" --keys "$rows" >&2
sl_mktemp_dir dir sluice-hs-floor

# Server CPU microseconds per lookup while "$@" runs; LOOKUPS is the count.
per_lookup() {
    local lookups=$1 before after
    shift
    before=$(sl_proc_cpu_ticks "$SL_MY_PID")
    "$@" >/dev/null
    after=$(sl_proc_cpu_ticks "$SL_MY_PID")
    python3 -c "print(f'{($after - $before) * 1e6 / $(getconf CLK_TCK) / $lookups:.2f}')"
}

printf '| what | lookups | server CPU µs per lookup |\n|---|--:|--:|\n'
for n in 1 4 40 400; do
    count=$((stmts * 40 / n))
    python3 - "$rows" "$count" "$n" >"$dir/in-$n.sql" <<'EOF'
import random, sys
rows, count, n = map(int, sys.argv[1:])
rng = random.Random(n)
for _ in range(count):
    keys = ",".join(str(rng.randint(1, rows)) for _ in range(n))
    print(f"SELECT `id`, `id`, `k`, `c`, `pad` FROM `bench`.`sluice_bench` WHERE `id` IN ({keys});")
EOF
    cost=$(per_lookup $((count * n)) sl_mariadb_admin bench <"$dir/in-$n.sql")
    printf '| IN list, %d random keys per statement (text protocol) | %d | %s |\n' "$n" $((count * n)) "$cost"
done
for depth in 1 16; do
    out="$dir/plugin-$depth.json"
    before=$(sl_proc_cpu_ticks "$SL_MY_PID")
    "$bench" run --scenario kv-lookup --addr "127.0.0.1:$hs" --connections 128 --depth "$depth" \
        --duration 5 --warmup 0 --keys "$rows" --json "$out" >/dev/null
    after=$(sl_proc_cpu_ticks "$SL_MY_PID")
    python3 - "$out" "$before" "$after" "$(getconf CLK_TCK)" "$depth" <<'EOF'
import json, sys
ops = json.load(open(sys.argv[1]))["summary"]["ops"]
ticks = int(sys.argv[3]) - int(sys.argv[2])
print(f"| plugin, 128 connections, depth {sys.argv[5]} (its network I/O included) | {ops} | {ticks * 1e6 / int(sys.argv[4]) / ops:.2f} |")
EOF
done
