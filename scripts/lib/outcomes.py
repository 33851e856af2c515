#!/usr/bin/env python3
"""Summarise and compare per-test outcome files ("nodeid<TAB>outcome" lines)
written by outcomes_pytest_plugin.py.

  outcomes.py summary LABEL OUTCOMES FAILED_OUT
      prints "LABEL: N passed, N failed, N skipped" (plus xfailed/xpassed
      when non-zero) and writes the failed test ids to FAILED_OUT.

  outcomes.py compare BASELINE_LABEL BASELINE OTHER_LABEL OTHER [ALLOW_FILE MODE]
      prints both summaries and every test whose outcome differs; exit 1 if
      the counts or any test's outcome differ, 0 if identical.
      With ALLOW_FILE and MODE: lines "MODE<TAB>test id<TAB>reason" of that
      file whose MODE matches name tests that may go from passed to failed
      (known limitations); such differences are listed but do not fail the
      comparison. A listed test that passes anyway is reported, not failed.

  outcomes.py table RESULTS SUITE...
      prints a Markdown table of the passed/failed/skipped counts of each
      SUITE's runs in RESULTS (the results dir of scripts/driver-suites.sh):
      RESULTS/SUITE-direct, SUITE-sluice-session, SUITE-sluice-transaction
      (psycopg2's without the SUITE- prefix), as in docs/compatibility.md.
"""

import os

import sys
from collections import Counter


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            nodeid, outcome = line.rsplit("\t", 1)
            out[nodeid] = outcome
    return out


def summary_line(label, outcomes):
    c = Counter(outcomes.values())
    s = f"{label}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"
    for extra in ("xfailed", "xpassed"):
        if c[extra]:
            s += f", {c[extra]} {extra}"
    return s


def cmd_summary(label, path, failed_out):
    outcomes = load(path)
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    with open(failed_out, "w") as f:
        for n in failed:
            f.write(n + "\n")
    print(summary_line(label, outcomes))
    return 0


def load_allowed(path, mode):
    allowed = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m, nodeid, reason = (line.split("\t") + ["", ""])[:3]
            if m == mode:
                allowed[nodeid] = reason
    return allowed


def cmd_compare(blabel, bpath, olabel, opath, allow_path=None, mode=None):
    base, other = load(bpath), load(opath)
    allowed = load_allowed(allow_path, mode) if allow_path else {}
    print("  " + summary_line(blabel, base))
    print("  " + summary_line(olabel, other))
    diffs = []
    for nodeid in sorted(set(base) | set(other)):
        b, o = base.get(nodeid, "absent"), other.get(nodeid, "absent")
        if b != o:
            diffs.append((nodeid, b, o))
    known = [d for d in diffs if d[0] in allowed and d[1] == "passed" and d[2] == "failed"]
    unexpected = [d for d in diffs if d not in known]
    if not diffs:
        print(f"  {olabel}: identical to {blabel}")
    if known:
        print(f"  {len(known)} known difference(s) ({blabel} -> {olabel}), allowed by {allow_path}:")
        for nodeid, b, o in known:
            print(f"    {b:>8} -> {o:<8} {nodeid}  [{allowed[nodeid]}]")
    fixed = sorted(n for n in allowed if n in other and other[n] == base.get(n))
    if fixed:
        print(f"  {len(fixed)} listed known difference(s) did not occur (fixed, or timing-dependent):")
        for nodeid in fixed:
            print(f"    {nodeid}")
    if unexpected:
        print(f"  {len(unexpected)} test(s) differ ({blabel} -> {olabel}):")
        for nodeid, b, o in unexpected:
            print(f"    {b:>8} -> {o:<8} {nodeid}")
        return 1
    return 0


def counts(path):
    if not os.path.exists(path):
        return "not run"
    c = Counter(load(path).values())
    cell = f"{c['passed']} / {c['failed']} / {c['skipped']}"
    extra = [f"{c[k]} {k}" for k in ("xfailed", "xpassed") if c[k]]
    return cell + (f" ({', '.join(extra)})" if extra else "")


def cmd_table(results, suites):
    print("| driver | direct | Sluice session mode | Sluice transaction mode "
          "| Sluice session mode, first_statement |")
    print("|---|---|---|---|---|")
    for suite in suites:
        prefix = "" if suite == "psycopg2" else suite + "-"
        cells = [counts(os.path.join(results, prefix + run, "outcomes.tsv"))
                 for run in ("direct", "sluice-session", "sluice-transaction",
                             "sluice-lazy")]
        print(f"| {suite} | " + " | ".join(cells) + " |")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "table":
        return cmd_table(argv[1], argv[2:])
    if len(argv) == 4 and argv[0] == "summary":
        return cmd_summary(*argv[1:])
    if len(argv) in (5, 7) and argv[0] == "compare":
        return cmd_compare(*argv[1:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
