"""The skip for tests of an optional extra whose package is missing: outside CI only (CI installs every
extra, so there a missing package fails the test)."""

from __future__ import annotations

import importlib.util
import os

import pytest

TORCH_GROUP = "torch"
"""The xdist group of the modules whose extras import torch and transformers (train, retrieval): seconds
of CPU per process, so one worker imports them once for all."""


def require_extra(module: str, extra: str) -> None:
    """Skip the calling test module unless ``module`` is installed; in CI (CI=true) fail instead. Found, not
    imported: a module such as openenv.core takes seconds to import, which every xdist worker would pay
    while collecting; the tests that use it import it."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # its parent package is missing
        spec = None
    if spec is None:
        reason = f"{module} is not installed: pip install 'hopgym[{extra}]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the {extra} extra must be installed in CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
