"""pytest plugin used by the driver suites (scripts/*-suite.sh through
scripts/lib/pysuite.sh; loaded with -p).

Records one final outcome per test id into the file named by the SUITE_OUTCOMES
env var, one "nodeid<TAB>outcome" line each (the format scripts/lib/outcomes.py
reads), where outcome is passed, failed, skipped, xfailed or xpassed. A failure
in setup or teardown ("error" in pytest's summary) counts as failed. A test
module that cannot be collected (an import error) is recorded under the
module's id as failed, or as skipped for a module-level skip (e.g.
importorskip), so that a whole module lost through a proxy shows up in the
comparison.
"""

import os

import pytest

_outcomes = {}
_RANK = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2}


def _record(nodeid, outcome):
    old = _outcomes.get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _outcomes[nodeid] = outcome


@pytest.hookimpl(trylast=True)
def pytest_collectreport(report):
    if report.nodeid and report.nodeid.endswith(".py"):
        if report.failed:
            _record(report.nodeid, "failed")
        elif report.skipped:
            _record(report.nodeid, "skipped")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if hasattr(report, "wasxfail"):
        if report.skipped:
            _record(report.nodeid, "xfailed")
        elif report.passed and report.when == "call":
            _record(report.nodeid, "xpassed")
        return
    if report.failed:
        _record(report.nodeid, "failed")
    elif report.skipped:
        _record(report.nodeid, "skipped")
    elif report.passed and report.when == "call":
        _record(report.nodeid, "passed")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("SUITE_OUTCOMES")
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for nodeid in sorted(_outcomes):
            f.write(f"{nodeid}\t{_outcomes[nodeid]}\n")
    os.replace(tmp, path)
