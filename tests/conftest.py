"""Suite-wide scheduling: `make test` runs the suite on two pytest-xdist workers (--dist loadgroup)."""

from __future__ import annotations

import pytest

LOCAL_MODEL_GROUP = "local-model"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the embedded model run one after another on one worker: each keeps both cores busy with
    prompt evaluation, and two at once only take twice as long each (the other worker runs the rest)."""
    for item in items:
        if item.get_closest_marker("model") is not None:
            item.add_marker(pytest.mark.xdist_group(LOCAL_MODEL_GROUP))
