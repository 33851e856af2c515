#!/usr/bin/env python3
"""Turn the raw results of scripts/bench-pgbench.sh (or, one workload at a
time, scripts/bench-mysql.sh) into a markdown table.

  bench_report.py RAW_TSV CLK_TCK TARGETS CLIENTS [RATE CLIENT_WORD]

RAW_TSV columns (one row per pgbench run, header line first):
  clients target round status tps latency_ms txns cpu_ticks
status is "ok" or "error"; cpu_ticks is the proxy's utime+stime delta over the
run ("-" for direct); txns is the number of queries (one query per
transaction in both benchmarks). TARGETS and CLIENTS are space-separated, in
report order. RATE names the rate column (default "tps"; bench-mysql.sh says
"qps"), CLIENT_WORD the client column (default "clients"; "threads").
"""

import statistics
import sys
from collections import defaultdict


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def main(raw, clk_tck, targets, clients, rate="tps", client_word="clients"):
    clk_tck = float(clk_tck)
    targets = targets.split()
    clients = [int(c) for c in clients.split()]
    runs = defaultdict(list)
    errors = defaultdict(int)
    with open(raw) as f:
        next(f)
        for line in f:
            c, t, _rnd, status, tps, lat, txns, ticks = line.rstrip("\n").split("\t")
            key = (int(c), t)
            if status != "ok":
                errors[key] += 1
                continue
            cpu_ms_per_1k = None
            if ticks != "-" and int(txns) > 0:
                # ticks -> seconds -> ms, per 1,000 queries (pgbench -S: 1 query/txn)
                cpu_ms_per_1k = int(ticks) / clk_tck * 1000.0 / (int(txns) / 1000.0)
            runs[key].append((float(tps), float(lat), cpu_ms_per_1k))

    med = {}
    for key, rs in runs.items():
        cpus = [r[2] for r in rs if r[2] is not None]
        med[key] = (
            statistics.median(r[0] for r in rs),
            statistics.median(r[1] for r in rs),
            statistics.median(cpus) if cpus else None,
            len(rs),
            min(r[0] for r in rs),
            max(r[0] for r in rs),
        )

    out = []
    out.append(
        f"| {client_word} | target | median {rate} | ratio to direct | proxy CPU ms / 1k queries "
        f"| latency avg (ms) | {rate} min–max | runs ok |"
    )
    out.append("|--:|---|--:|--:|--:|--:|--:|--:|")
    for c in clients:
        direct = med.get((c, "direct"))
        for t in targets:
            key = (c, t)
            n_err = errors.get(key, 0)
            if key not in med:
                out.append(f"| {c} | {t} | error | — | — | — | — | 0/{n_err} |")
                continue
            tps, lat, cpu, n, lo, hi = med[key]
            ratio = tps / direct[0] if direct else None
            out.append(
                f"| {c} | {t} | {tps:,.0f} | {fmt(ratio, '.2f')} | "
                f"{fmt(cpu, '.1f')} | {lat:.3f} | {lo:,.0f}–{hi:,.0f} | {n}/{n + n_err} |"
            )

    if 1 in clients and (1, "direct") in med:
        d = med[(1, "direct")][0]
        lines = []
        for t in targets:
            if t != "direct" and (1, t) in med:
                added = 1e6 / med[(1, t)][0] - 1e6 / d
                lines.append(f"| {t} | {added:.1f} |")
        if lines:
            out.append("")
            one = client_word[:-1] if client_word.endswith("s") else client_word
            out.append(
                f"Added latency per query at 1 {one} (1/{rate}_target − 1/{rate}_direct, median {rate}):"
            )
            out.append("")
            out.append("| target | added µs / query |")
            out.append("|---|--:|")
            out.extend(lines)
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) not in (5, 7):
        sys.stderr.write(__doc__)
        sys.exit(2)
    main(*sys.argv[1:])
