"""Running untrusted code: the worker protocol and the isolated backends behind one interface."""

from __future__ import annotations

import importlib
from typing import Any

from hopgym.errors import ConfigError
from hopgym.options import check_keywords
from hopgym.sandbox.base import CallResult, LoadResult, Sandbox, ToolCallHook
from hopgym.sandbox.limits import LIMIT_OPTIONS

BACKENDS = ("process", "docker")

__all__ = ["BACKENDS", "CallResult", "LoadResult", "Sandbox", "ToolCallHook", "make_sandbox"]


def make_sandbox(backend: str = "process", **options: Any) -> Sandbox:
    """A sandbox of the named backend; ``options`` go to its constructor (e.g. ``isolation``, ``timeout``)."""
    if backend == "process":
        from hopgym.sandbox.process import ProcessSandbox

        backend_class: type[Sandbox] = ProcessSandbox
    elif backend == "docker":
        backend_class = importlib.import_module("hopgym.sandbox.docker.backend").DockerSandbox
    else:
        raise ConfigError(f"sandbox backend {backend!r} is unknown; valid: {', '.join(BACKENDS)}")
    what = f"the {backend} sandbox (sandbox_options)"
    check_keywords(backend_class.__init__, options, what, unpacked=LIMIT_OPTIONS)
    return backend_class(**options)
