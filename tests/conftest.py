"""Suite-wide scheduling: `make test` runs the suite on two pytest-xdist workers (--dist loadgroup)."""

from __future__ import annotations

import os

import pytest

from hopgym.agents.local_server import THREADS_VARIABLE

LOCAL_MODEL_GROUP = "local-model"

# The other worker keeps the second core busy: an embedded server with llama-cpp's default two threads to
# read prompts spins at every barrier while its second thread waits for a core. One thread does the same
# work without the spinning.
os.environ.setdefault(THREADS_VARIABLE, "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the embedded model run one after another on one worker: two servers at once would share
    one core and evict nothing from each other's cache, only take twice as long each."""
    for item in items:
        if item.get_closest_marker("model") is not None:
            item.add_marker(pytest.mark.xdist_group(LOCAL_MODEL_GROUP))
