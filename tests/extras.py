"""The skip for tests of an optional extra whose package is missing: outside CI only (CI installs every
extra, so there a missing package fails the test)."""

from __future__ import annotations

import importlib
import os

import pytest


def require_extra(module: str, extra: str) -> None:
    """Skip the calling test module unless ``module`` imports; in CI (CI=true) fail instead."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is missing ({exc}): pip install 'hopgym[{extra}]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the {extra} extra must be installed in CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
