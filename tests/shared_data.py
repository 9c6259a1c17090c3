"""Where tests find the shared data ($HOPGYM_DATA), and the skip for when it is missing, outside CI only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("HOPGYM_DATA") or "/nonexistent")
SUBSET = DATA / "toolhop" / "toolhop_subset100.jsonl"


def needs_data(relative: str) -> pytest.MarkDecorator:
    """Skip when ``$HOPGYM_DATA/<relative>`` is missing; in CI (CI=true) the test runs and fails instead."""
    return pytest.mark.skipif(
        not (DATA / relative).is_file() and os.environ.get("CI") != "true",
        reason=f"HOPGYM_DATA does not point at the shared data ({relative})",
    )
