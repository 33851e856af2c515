"""pytest plugin used by scripts/psycopg2-suite.sh (loaded with -p, beside
outcomes_pytest_plugin, which records the outcomes).

Drops the module-level ``test_suite()`` functions of psycopg2's test modules.
They are unittest loader helpers, not tests; pytest collects them anyway (25 of
them, each "passing" with a PytestReturnNotNoneWarning), which would inflate
the pass count from 700 to 725.
"""


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
