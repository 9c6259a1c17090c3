"""The one interface every sandbox backend implements.

A sandbox runs untrusted tool code. The env layer only sees this interface: it loads one task's tool
sources per episode (a fresh namespace every time) and calls functions by name with JSON arguments.
Backends (``process``, ``docker``) differ in how the worker is isolated, never in behaviour.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

CallStatus = Literal["ok", "error", "timeout", "resource_limit"]
"""``ok``: the function returned; ``error``: it raised (or the call could not be made, e.g. unknown name);
``timeout``: the wall-clock limit killed the worker; ``resource_limit``: memory, CPU-seconds, file-size or
output limits stopped it (the worker may have been replaced)."""
CALL_STATUSES: tuple[CallStatus, ...] = get_args(CallStatus)


@dataclass(frozen=True)
class CallResult:
    """What one function call (or one code execution) produced inside the sandbox."""

    status: CallStatus
    value: Any = None
    """The return value, JSON-serialised inside the worker (non-JSON values arrive as their ``repr``)."""
    error: str | None = None
    """``"ExceptionType: message"`` when the code raised, or a description of the limit that stopped it."""
    stdout: str = ""
    """Captured stdout and stderr of the call, capped."""
    truncated: bool = False
    """True when ``value`` (or the output) was cut at the size cap; the value then is a string ending in a
    marker that gives the full length."""
    latency_ms: float = 0.0
    tool_calls: tuple[dict[str, Any], ...] = ()
    """For :meth:`Sandbox.execute`: one ``{"name", "arguments", "status", "value", "error", "truncated"}`` per
    call of a loaded function made from the code, in order (calls refused by the hook included), recorded by
    the host, which ran each call itself; ``truncated``: its arguments or value were cut to the host's
    bounds."""


@dataclass(frozen=True)
class LoadResult:
    """What loading one episode's tool sources produced."""

    functions: tuple[str, ...]
    """Names of the callable functions now defined in the episode namespace."""
    errors: tuple[str, ...] = field(default=())
    """One message per source that failed to compile or execute (the others are still loaded)."""


ToolCallHook = Callable[[str, dict[str, Any]], "str | None"]
"""Called on the host for each tool call made from code run by :meth:`Sandbox.execute`.
Returns ``None`` to let the call run, or an error text that the call raises inside the code instead."""


class Sandbox(ABC):
    """A pool of isolated workers that run one episode's tool code at a time."""

    @property
    @abstractmethod
    def isolation(self) -> str:
        """The isolation in force, e.g. ``"bwrap+seccomp+rlimits"``; never silently weaker than asked."""

    @property
    def isolates_files(self) -> bool:
        """Whether tool code is kept from the files of the process that made the sandbox (its data, its
        keys); a server refuses untrusted code where it is not (``hopgym serve env``)."""
        return True

    @abstractmethod
    def load(
        self,
        sources: Sequence[str],
        compiled: Sequence[bytes | None] | None = None,
        meanwhile: Callable[[], object] | None = None,
    ) -> LoadResult:
        """Start an episode: a fresh namespace (fresh worker) holding the given module sources.

        ``compiled``: for each source, the host's own compilation of it (``tasks.tool_source.
        compile_tool_code``: the magic number, then marshal data) or None; a backend may run it instead of
        compiling the text. Only code this host compiled from the very source belongs here.
        ``meanwhile``: the caller's own episode set-up, run while the worker loads (so the two overlap; not
        at all when the request cannot be sent, which the result's errors then say). It must not use this
        sandbox (``SandboxError``). If it raises, the exception propagates and no episode is loaded: calls
        raise ``SandboxError`` until the next ``load``, which takes a fresh worker."""

    @abstractmethod
    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        timeout: float | None = None,
        *,
        as_json_text: bool = False,
    ) -> CallResult:
        """Call ``name(**arguments)`` in the current episode namespace.

        ``as_json_text``: the value is ``json.dumps(result, ensure_ascii=False)`` made in the worker, and a
        result that has no JSON text fails with the error ``json.dumps`` raised (as the official ToolHop
        code reports it)."""

    @abstractmethod
    def execute(
        self, code: str, on_tool_call: ToolCallHook | None = None, timeout: float | None = None
    ) -> CallResult:
        """Run a code block (CodeAct) in the episode namespace with the loaded functions bound.

        ``value`` is the value of the last expression (or None); ``stdout`` holds what the code printed.
        The code runs apart from the tool code: each call of a loaded function from the code is first passed
        to ``on_tool_call``, then run by the host as :meth:`call` would, and the code gets its JSON value (a
        failure raises the builtin exception its error names, else ``ToolError``)."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker; the sandbox is unusable afterwards."""

    def wait_until_warm(self, timeout: float | None = None) -> None:
        """Block until the workers kept ready for later episodes have started (at once where none are
        kept), so that a run can start its episodes without sharing the CPU with their start-up."""
        return  # a backend without pre-started workers is always warm

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
