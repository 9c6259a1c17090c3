"""Suite-wide scheduling: `make test` runs the suite on three pytest-xdist workers (--dist loadgroup)."""

from __future__ import annotations

import os

import pytest

from hopgym.agents.model.local_server import THREADS_VARIABLE

LOCAL_MODEL_GROUP = "local-model"
EARLY = "early"
"""The mark of a long single test (15 s or more under ``make test``, in no group): xdist queues groups before
single tests, and single tests in collection order, so an early one is started first among them, not left
to end the run while the other workers wait."""

# The other worker keeps the second core busy: an embedded server with llama-cpp's default two threads to
# read prompts spins at every barrier while its second thread waits for a core. One thread does the same
# work without the spinning.
os.environ.setdefault(THREADS_VARIABLE, "1")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns group marks into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the embedded model run one after another on one worker: two servers at once would share
    one core and evict nothing from each other's cache, only take twice as long each. The tests of a
    module with a module-scoped fixture run on one worker too, so that the fixture (a sampled KG, a
    generated trajectory set: up to a minute) is built once, not once per worker. A group a test names
    itself is kept. Tests marked early move to the front of the collection."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if item.get_closest_marker("model") is not None:
            item.add_marker(pytest.mark.xdist_group(LOCAL_MODEL_GROUP))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=lambda item: item.get_closest_marker(EARLY) is None)  # stable: the rest keep their order


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is None:
        return False
    return any(d.scope == "module" for defs in fixture_info.name2fixturedefs.values() for d in defs)


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker with ``--dist loadgroup``: fail loudly if a group mark came too late for xdist
    to see (it reads the marks into node ids in its own collection hook); the groups then do nothing."""
    if not getattr(session.config.option, "loadgroup", False):  # set by xdist on its workers
        return
    ungrouped = [
        i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
    ]
    if ungrouped:
        raise pytest.UsageError(
            f"{len(ungrouped)} tests have an xdist_group mark xdist did not apply: {ungrouped[0]}"
        )
