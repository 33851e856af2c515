#!/usr/bin/env python3
"""Turn the raw results of scripts/bench-hs.sh into markdown tables.

  bench_hs_report.py RAW_TSV CLK_TCK TARGETS CONNECTIONS

RAW_TSV columns (one row per sluice-bench run, header line first):
  connections target round status ops_per_sec p50_us p99_us answered
  sluice_ticks server_ticks selects
status is "ok" or "error"; answered counts every answer of the run (warm-up
included), which the CPU ticks (utime+stime over the whole run) and the
server's Com_select delta ("selects", Sluice targets only) are divided by.
TARGETS (sql-direct, plugin-dD, sluice-dD, ...) and CONNECTIONS are
space-separated, in report order.
"""

import statistics
import sys
from collections import defaultdict


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def depth_of(target):
    """plugin-d16 -> "16"; sql-direct -> None."""
    _, _, d = target.rpartition("-d")
    return d if d.isdigit() else None


def main(raw, clk_tck, targets, connections):
    clk_tck = float(clk_tck)
    targets = targets.split()
    connections = [int(c) for c in connections.split()]
    runs = defaultdict(list)
    total = defaultdict(int)
    with open(raw) as f:
        next(f)
        for line in f:
            (c, t, _rnd, status, ops, p50, p99, answered, s_ticks, m_ticks,
             selects) = line.rstrip("\n").split("\t")
            key = (int(c), t)
            total[key] += 1
            if status != "ok":
                continue
            n = int(answered)

            def per_1k(ticks):
                if ticks == "-" or n == 0:
                    return None
                return int(ticks) / clk_tck * 1000.0 / (n / 1000.0)

            per_select = None
            if selects != "-" and int(selects) > 0:
                per_select = n / int(selects)
            runs[key].append({
                "ops": float(ops),
                "p50": int(p50),
                "p99": int(p99),
                "sluice_cpu": per_1k(s_ticks),
                "server_cpu": per_1k(m_ticks),
                "per_select": per_select,
            })

    summary = {}
    for key, rs in runs.items():
        summary[key] = {
            "ops": med(r["ops"] for r in rs),
            "min": min(r["ops"] for r in rs),
            "max": max(r["ops"] for r in rs),
            "p50": med(r["p50"] for r in rs),
            "p99": med(r["p99"] for r in rs),
            "sluice_cpu": med(r["sluice_cpu"] for r in rs),
            "server_cpu": med(r["server_cpu"] for r in rs),
            "per_select": med(r["per_select"] for r in rs),
            "ok": len(rs),
        }

    out = [
        "| connections | target | depth | median lookups/s | × SQL direct | × plugin "
        "| p50 µs | p99 µs | Sluice CPU ms / 1k lookups | server CPU ms / 1k lookups "
        "| lookups per SELECT | lookups/s min–max | runs ok |",
        "|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in connections:
        direct = summary.get((c, "sql-direct"))
        for t in targets:
            key = (c, t)
            s = summary.get(key)
            d = depth_of(t)
            depth = d if d is not None else "1"
            if s is None:
                out.append(f"| {c} | {t} | {depth} | error | — | — | — | — | — | — | — | — "
                           f"| 0/{total.get(key, 0)} |")
                continue
            vs_direct = s["ops"] / direct["ops"] if direct and direct["ops"] else None
            plugin = summary.get((c, f"plugin-d{d}")) if d is not None else None
            vs_plugin = None
            if plugin and plugin["ops"] and not t.startswith("plugin-"):
                vs_plugin = s["ops"] / plugin["ops"]
            elif t.startswith("plugin-"):
                vs_plugin = 1.0
            out.append(
                f"| {c} | {t} | {depth} | {s['ops']:,.0f} | {fmt(vs_direct, '.2f')} "
                f"| {fmt(vs_plugin, '.2f')} | {fmt(s['p50'], '.0f')} | {fmt(s['p99'], '.0f')} "
                f"| {fmt(s['sluice_cpu'], '.1f')} | {fmt(s['server_cpu'], '.1f')} "
                f"| {fmt(s['per_select'], '.1f')} | {s['min']:,.0f}–{s['max']:,.0f} "
                f"| {s['ok']}/{total[key]} |"
            )
    out.append("")
    out.append("`sluice-pg-dD`: Sluice's HandlerSocket over the same table on PostgreSQL "
               "(server CPU and lookups per SELECT are MariaDB's counters, so not shown).")
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
