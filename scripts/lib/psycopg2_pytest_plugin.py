"""pytest plugin used by scripts/psycopg2-suite.sh (loaded with -p).

* Drops the module-level ``test_suite()`` functions of psycopg2's test
  modules. They are unittest loader helpers, not tests; pytest collects them
  anyway (25 of them, each "passing" with a PytestReturnNotNoneWarning), which
  would inflate the pass count from 700 to 725.
* Records one final outcome per test id into the file named by the
  PSYCOPG2_SUITE_OUTCOMES env var, one "nodeid<TAB>outcome" line each, where
  outcome is passed, failed, skipped, xfailed or xpassed. A failure in setup
  or teardown ("error" in pytest's summary) counts as failed.
"""

import os

import pytest

_outcomes = {}
_RANK = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2}


def pytest_collection_modifyitems(session, config, items):
    keep, dropped = [], []
    for item in items:
        if item.name == "test_suite" and getattr(item, "cls", None) is None:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _record(nodeid, outcome):
    old = _outcomes.get(nodeid)
    if old is None or _RANK[outcome] > _RANK[old]:
        _outcomes[nodeid] = outcome


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
    path = os.environ.get("PSYCOPG2_SUITE_OUTCOMES")
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for nodeid in sorted(_outcomes):
            f.write(f"{nodeid}\t{_outcomes[nodeid]}\n")
    os.replace(tmp, path)
