"""The skip for tests of an optional extra or a system program that is missing: outside CI only. CI installs
every extra and, through ``make system-deps``, every system package, so there a missing one fails the test;
a new user's ``make test`` skips what their machine lacks and names the package to install."""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import NoReturn

import pytest

SYSTEM_DEPS_HINT = "make system-deps installs it"
ISOLATION_PROGRAMS = {"bwrap": ("bwrap", "bubblewrap")}
"""Sandbox isolation level -> (the program it runs, the Debian package that ships it)."""

TORCH_GROUP = "torch"
"""The xdist group of the modules whose extras import torch and transformers (train, retrieval), but for
tests/train/test_train_grpo.py: seconds of CPU per process, so one worker imports them once for all of
them."""
GRPO_GROUP = "torch-grpo"
"""tests/train/test_train_grpo.py's xdist group, beside ``TORCH_GROUP`` on another worker: as one group the
torch tests ran one after another for 200 s on a quiet machine (2026-11-29), the end of ``make test``;
split, the longer part is GRPO's 110 s, for one more import of torch and TRL (7 s of CPU). Two workers
training at once fit in memory: the largest torch test (test_train_environments' three-env run) peaks at
5.2 GB, GRPO's at 1.5 GB."""


def require_extra(module: str, extra: str) -> None:
    """Skip the calling test module unless ``module`` is installed; in CI (CI=true) fail instead. Found, not
    imported: a module such as openenv.core takes seconds to import, which every xdist worker would pay
    while collecting; the tests that use it import it."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # its parent package is missing
        spec = None
    if spec is None:
        unavailable(f"{module} is not installed: pip install 'hopgym[{extra}]'", module_level=True)


def unavailable(reason: str, module_level: bool = False) -> NoReturn:
    """Skip with ``reason``; in CI (CI=true), where everything is installed, fail with it instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"must be available in CI: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


def require_program(program: str, package: str) -> None:
    """Skip the calling test unless ``program`` is on PATH (CI: fail), naming the Debian ``package``."""
    if shutil.which(program) is None:
        unavailable(f"{program} is not on PATH: apt-get install {package} ({SYSTEM_DEPS_HINT})")


def require_isolation(level: str) -> None:
    """Skip the calling test unless the process sandbox's isolation ``level`` can run here (CI: fail):
    ``bwrap`` needs bubblewrap, ``namespaces`` needs root."""
    if level in ISOLATION_PROGRAMS:
        require_program(*ISOLATION_PROGRAMS[level])
    if level == "namespaces" and os.geteuid() != 0:
        unavailable("the sandbox's raw namespaces need root")
