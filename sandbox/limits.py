"""Every limit a sandbox enforces, in one object checked in one place and shared by both backends.

The worker applies the rlimits and caps itself (``worker_config``); the host holds the deadlines, the
caps on a code block's tool calls and, per worker, a cgroup (``process``) or a container (``docker``)
sized from the same numbers (:func:`cgroup_memory_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, TypedDict

from hopgym.errors import ConfigError
from hopgym.sandbox.bounded import MARKER_ROOM, Budget

POLICIES = (None, "restricted")
"""The code policies a worker applies on top of its isolation (``restricted``: RestrictedPython)."""
DEFAULT_TIMEOUT = 5.0
"""Seconds a load and a call may take unless the sandbox is told otherwise."""
DEFAULT_MAX_TOOL_CALLS = 200
"""Tool calls one code block may make; ToolHop tasks need at most a dozen."""
DEFAULT_MAX_EVENT_BYTES = 4 << 20
"""Bytes of tool-call events (arguments and values) one code block may send to the host."""
DEFAULT_MAX_EVENT_ITEMS = 1 << 16
"""Items (list elements, object entries) of the arguments and values of one code block's tool calls that
the host keeps; with the characters, bounded by ``max_event_bytes``, what its records hold (a few MiB)."""
CGROUP_HEADROOM_MB = 64
"""Room above the rlimit and /tmp for the interpreter, its init and the kernel's own use."""


class LimitOptions(TypedDict, total=False):
    """The limits every backend takes as keyword options (``sandbox_options``), typed for its
    ``**limits: Unpack[LimitOptions]``; each is a :class:`SandboxLimits` field of the same name, but
    ``timeout``: the deadline of both loads and calls (see :meth:`SandboxLimits.of`)."""

    timeout: float
    load_timeout: float
    call_timeout: float
    memory_mb: int
    cpu_seconds: int
    file_mb: int
    open_files: int
    output_cap: int
    result_cap: int
    max_tool_calls: int


LIMIT_OPTIONS = tuple(LimitOptions.__annotations__)


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one sandbox; a value out of range raises :class:`ConfigError` naming it and the range."""

    load_timeout: float = DEFAULT_TIMEOUT
    """Seconds one ``load`` may take (also the reload into a worker that replaced a failed one)."""
    call_timeout: float = DEFAULT_TIMEOUT
    """Seconds one ``call`` or ``execute`` may take unless the call gives its own deadline."""
    start_timeout: float = 30.0
    """Seconds a worker may take to start and say it is ready."""
    memory_mb: int = 512
    """The worker's address-space rlimit (the cgroup or container adds /tmp and headroom)."""
    cpu_seconds: int = 60
    file_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    """The size of the worker's private /tmp."""
    output_cap: int = 16_384
    """Characters of printed output kept per call."""
    result_cap: int = 65_536
    """Characters of a JSON-serialised result kept per call."""
    max_tasks: int = 64
    """Processes and threads one worker may hold (its cgroup's, or its container's, pids limit)."""
    cpus: float = 1.0
    """CPUs one worker may use (the docker backend's container limit)."""
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_event_items: int = DEFAULT_MAX_EVENT_ITEMS

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            floor = 0 if field.name in ("max_tool_calls", "max_event_bytes", "max_event_items") else 1
            if field.type == "float":
                valid = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
                if not valid or not math.isfinite(value):
                    raise ConfigError(f"{field.name}={value!r} is not a limit; valid: a positive number")
            elif not isinstance(value, int) or isinstance(value, bool) or value < floor:
                what = "a positive whole number" if floor else "a whole number, 0 or more"
                raise ConfigError(f"{field.name}={value!r} is not a limit; valid: {what}")

    @classmethod
    def of(
        cls,
        timeout: float = DEFAULT_TIMEOUT,
        load_timeout: float | None = None,
        call_timeout: float | None = None,
        **limits: Any,
    ) -> SandboxLimits:
        """The backends' options as limits: ``timeout`` is the deadline of both loads and calls, unless
        ``load_timeout`` or ``call_timeout`` names that one's own."""
        return cls(
            load_timeout=timeout if load_timeout is None else load_timeout,
            call_timeout=timeout if call_timeout is None else call_timeout,
            **limits,
        )

    def result_budget(self) -> Budget:
        """What one call's value may hold on the host (see :mod:`hopgym.sandbox.bounded`): what a value of
        ``result_cap`` characters of JSON can hold, and the marker of a cut one; a worker whose value holds
        more broke its own cap."""
        return Budget(items=self.result_cap // 2, chars=self.result_cap + MARKER_ROOM)

    def event_budget(self) -> Budget:
        """What the arguments and values of one code block's tool calls may hold on the host, together."""
        return Budget(items=self.max_event_items, chars=self.max_event_bytes)

    def rlimits(self) -> dict[str, int]:
        return {
            "memory_bytes": self.memory_mb << 20,
            "cpu_seconds": self.cpu_seconds,
            "file_bytes": self.file_mb << 20,
            "open_files": self.open_files,
        }

    def worker_config(self, *, seccomp: bool, policy: str | None) -> dict[str, Any]:
        """The keys of the worker's CONFIG_JSON (see ``worker.main``) that every backend sets."""
        return {
            "seccomp": seccomp,
            "rlimits": self.rlimits(),
            "policy": policy,
            "output_cap": self.output_cap,
            "result_cap": self.result_cap,
        }


def check_policy(policy: str | None) -> str | None:
    """``policy`` when a worker can apply it, else :class:`ConfigError` naming the valid ones."""
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r} is not a policy; valid: None, 'restricted'")
    return policy


def cgroup_memory_bytes(limits: SandboxLimits) -> int:
    """The worker's memory rlimit plus its /tmp tmpfs and room for the interpreter and the kernel's own
    use; unlike the rlimit it also counts memfd and tmpfs pages and every process of the worker."""
    return (limits.memory_mb + limits.tmpfs_mb + CGROUP_HEADROOM_MB) << 20
