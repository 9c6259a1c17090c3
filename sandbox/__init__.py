"""Running untrusted code: the worker protocol and the isolated backends behind one interface."""

from __future__ import annotations

import importlib
from typing import Any

from hopgym.errors import ConfigError
from hopgym.sandbox.base import CallResult, LoadResult, Sandbox, ToolCallHook

BACKENDS = ("process", "docker")

__all__ = ["BACKENDS", "CallResult", "LoadResult", "Sandbox", "ToolCallHook", "make_sandbox"]


def make_sandbox(backend: str = "process", **options: Any) -> Sandbox:
    """A sandbox of the named backend; ``options`` go to its constructor (e.g. ``isolation``, ``timeout``)."""
    if backend == "process":
        from hopgym.sandbox.process import ProcessSandbox

        return ProcessSandbox(**options)
    if backend == "docker":
        return importlib.import_module("hopgym.sandbox.docker_backend").DockerSandbox(**options)
    raise ConfigError(f"sandbox backend {backend!r} is unknown; valid: {', '.join(BACKENDS)}")
