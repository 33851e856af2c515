#!/usr/bin/env bash
# Two Sluice binaries side by side, alternating: point selects through each, started in
# turn with benches/sluice-pg.toml and benches/sluice-my.toml, with the proxy's CPU ticks
# (user + system, from /proc) over each run. For a change that should cost nothing
# per statement: a quick look, not a benchmark file's medians.
#
#     scripts/bench-server.sh pg 25432 500 &  scripts/bench-server.sh mariadb 23306 500 &
#     target/release/sluice-bench setup --protocol pg --addr 127.0.0.1:25432 --keys 100000
#     target/release/sluice-bench setup --protocol mysql --addr 127.0.0.1:23306 --keys 100000
#     scripts/bench-ab.sh OLD_BINARY NEW_BINARY [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?old binary}
new=${2:?new binary}
rounds=${3:-2}
bench=target/release/sluice-bench

run() { # binary config address protocol mode connections
    local bin=$1 cfg=$2 addr=$3 proto=$4 mode=$5 conns=$6 pid t0 t1 out
    "$bin" --config "$cfg" >/dev/null 2>&1 &
    pid=$!
    sleep 1
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    out=$("$bench" run --scenario point-select --protocol "$proto" --mode "$mode" \
        --addr "$addr" --connections "$conns" --duration 5 --keys 100000 2>&1 \
        | grep -o '[0-9]* ops/s' | head -1)
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "$bin $proto $mode $conns clients on $addr: $out, cpu ticks $((t1 - t0))"
}

for _ in $(seq "$rounds"); do
    for bin in "$old" "$new"; do
        run "$bin" benches/sluice-pg.toml 127.0.0.1:26433 pg simple 16
        run "$bin" benches/sluice-pg.toml 127.0.0.1:26433 pg prepared 128
        run "$bin" benches/sluice-pg.toml 127.0.0.1:26432 pg prepared 16
        run "$bin" benches/sluice-my.toml 127.0.0.1:26034 mysql simple 16
        run "$bin" benches/sluice-my.toml 127.0.0.1:26033 mysql prepared 16
    done
done
