#!/usr/bin/env bash
# Instructions a Sluice binary spends per statement, counted by valgrind's callgrind:
# repeatable for the same binary and load, whatever else the machine is doing (seconds
# on these 2 shared cores vary by 10-20 % between runs). Point selects through one
# listener of a benchmark's Sluice config (below), run twice (N and 2N
# seconds of load); the difference of the two totals over the difference of the
# statements run is the cost of one statement, without start-up and logins.
#
#     scripts/bench-server.sh pg 25432 500 &  scripts/bench-server.sh mariadb 23306 500 &
#     target/release/sluice-bench setup --protocol pg --addr 127.0.0.1:25432 --keys 100000
#     target/release/sluice-bench setup --protocol mysql --addr 127.0.0.1:23306 --keys 100000
#     scripts/bench-instructions.sh BINARY [pg-session|pg-tx|pg-nodigest|my-session|my-tx|pg-plain|pg-features|pg-tls] \
#         [simple|prepared] [N]
#     scripts/bench-instructions.sh target/release/sluice-bench [relay-pg|relay-my] [simple|prepared] [N]
#
# (relay-pg, relay-my: `sluice-bench relay`, the bare TCP relay of benches/sessions.toml,
# to the server directly: what a hop costs that reads nothing of the protocol.)
#
# Prints instructions per statement and allocations per statement, and keeps the
# callgrind files (/tmp/sluice-instr-*.out) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?binary}
target=${2:-pg-session}
mode=${3:-simple}
secs=${4:-4}
bench=target/release/sluice-bench
# shellcheck source=lib/common.sh source-path=SCRIPTDIR
source scripts/lib/common.sh
tls=
case $target in
pg-session) cfg=benches/sluice-pg.toml addr=127.0.0.1:26432 proto=pg ;;
pg-tx) cfg=benches/sluice-pg.toml addr=127.0.0.1:26433 proto=pg ;;
# benches/sessions.toml's session-mode listener with query digests off.
pg-nodigest) cfg=benches/sluice-session-nodigest.toml addr=127.0.0.1:26452 proto=pg ;;
my-session) cfg=benches/sluice-my.toml addr=127.0.0.1:26033 proto=mysql ;;
my-tx) cfg=benches/sluice-my.toml addr=127.0.0.1:26034 proto=mysql ;;
# benches/features.toml's two listeners (transaction mode): plain, and with a split
# route, 100 rules and metrics (not scraped here).
pg-plain) cfg=benches/sluice-features-plain.toml addr=127.0.0.1:26461 proto=pg ;;
pg-features) cfg=benches/sluice-features-on.toml addr=127.0.0.1:26462 proto=pg ;;
# benches/storm.toml's PostgreSQL listener over TLS (transaction mode), with the
# throwaway certificate scripts/bench-server.sh uses (made here if missing).
pg-tls) cfg=benches/sluice-storm-pg.toml addr=127.0.0.1:26442 proto=pg tls=--tls ;;
relay-pg) relay_to=127.0.0.1:25432 addr=127.0.0.1:26480 proto=pg ;;
relay-my) relay_to=127.0.0.1:23306 addr=127.0.0.1:26481 proto=mysql ;;
*) echo "unknown target $target" >&2; exit 2 ;;
esac
if [ -n "${relay_to:-}" ]; then
    cmd=("$bin" relay --listen "$addr" --to "$relay_to")
else
    cmd=("$bin" --config "$cfg")
fi
[ -z "${tls:-}" ] || sl_test_certs /tmp/sluice-bench-certs

# Calls to the allocator in a callgrind file.
count_allocs='
import re, sys
names, cfn, calls = {}, None, 0
for line in open(sys.argv[1]):
    m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?", line)
    if m:
        i, n = m.groups()
        if n:
            names[i] = n
        if line.startswith("cfn"):
            cfn = names.get(i, i)
        continue
    m = re.match(r"^calls=(\d+)", line)
    if m and re.search(r"_rjem_(malloc|calloc|realloc)$", cfn or ""):
        calls += int(m.group(1))
print(calls)
'

# One run: callgrind's total instructions, statements run, allocations made.
one() {
    local d=$1 out=/tmp/sluice-instr-$target-$1.out pid n total allocs
    # A listener already there would be measured instead (a process left behind).
    if (echo >"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then
        echo "bench-instructions: $addr is taken before the start (a sluice left behind? pkill -f valgrind.bin)" >&2
        exit 1
    fi
    valgrind --tool=callgrind --callgrind-out-file="$out" "${cmd[@]}" \
        >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
        (echo >"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null && break
        sleep 0.5
    done
    n=$("$bench" run --scenario point-select --protocol "$proto" --mode "$mode" \
        --addr "$addr" --connections "${CONNECTIONS:-4}" --duration "$d" --warmup 0 --keys 100000 ${tls:-} 2>&1 \
        | grep -o '([0-9]* in' | tr -dc '0-9') || true
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
    if [ -z "$n" ]; then
        echo "bench-instructions: the load through $addr failed (servers up, tables set up?)" >&2
        exit 1
    fi
    total=$(callgrind_annotate "$out" 2>/dev/null \
        | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }')
    allocs=$(python3 -c "$count_allocs" "$out")
    echo "$n $total $allocs"
}

read -r n1 t1 a1 < <(one "$secs") || true
[ -n "${a1:-}" ] || exit 1
read -r n2 t2 a2 < <(one "$((secs * 2))") || true
[ -n "${a2:-}" ] || exit 1
echo "$bin $target $mode: $n1 and $n2 statements, $t1 and $t2 instructions"
# (Allocations are counted in jemalloc's functions, which sluice-bench does not use.)
awk -v n1="$n1" -v n2="$n2" -v t1="$t1" -v t2="$t2" -v a1="$a1" -v a2="$a2" \
    -v relay="${relay_to:-}" 'BEGIN {
    printf "instructions per statement: %.0f", (t2 - t1) / (n2 - n1)
    if (relay == "") printf ", allocations per statement: %.1f", (a2 - a1) / (n2 - n1)
    printf "\n" }'
