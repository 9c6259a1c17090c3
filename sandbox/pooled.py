"""Episode logic shared by every pooled backend: one fresh worker per episode, deadlines, replacement.

A call that outlives its wall-clock deadline, or a worker that dies or misbehaves, costs that worker: it is
killed, a warm spare takes its place, and the episode's sources are loaded into the spare so the episode
goes on. The failed call comes back as a :class:`CallResult` (never an exception on the host).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.errors import SandboxError, WorkerCrashedError, WorkerProtocolError, WorkerTimeoutError
from hopgym.sandbox.base import CallResult, CallStatus, LoadResult, Sandbox, ToolCallHook
from hopgym.sandbox.pool import Launcher, WorkerHandle, WorkerPool

_STATUSES: tuple[CallStatus, ...] = ("ok", "error", "timeout", "resource_limit")
_RESOURCE_SIGNALS = {signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL}
"""Deaths by these signals are limits (CPU seconds, file size, the kernel's OOM killer), not tool bugs."""
DEFAULT_MAX_TOOL_CALLS = 200
"""Tool calls one code block may make; ToolHop tasks need at most a dozen."""
DEFAULT_MAX_EVENT_BYTES = 4 << 20
"""Bytes of tool-call events (arguments and values) one code block may send to the host."""


class PooledSandbox(Sandbox):
    """A :class:`Sandbox` over a :class:`WorkerPool`; backends differ only in their launcher.

    ``max_tool_calls``: the most tool calls one :meth:`execute` may make (the host ends the code block and
    reports a resource limit past it); the tool-call events of one block may also total at most
    ``max_event_bytes``, so that a call flood cannot pile up host memory.
    """

    def __init__(
        self,
        launcher: Launcher,
        isolation: str,
        timeout: float = 5.0,
        spares: int = 1,
        preload: Sequence[str] = (),
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        if timeout <= 0:
            raise SandboxError(f"timeout must be positive seconds, got {timeout!r}")
        if max_tool_calls < 0 or max_event_bytes < 0:
            raise SandboxError(
                f"max_tool_calls and max_event_bytes must be 0 or more, got {max_tool_calls!r}, "
                f"{max_event_bytes!r}"
            )
        self._isolation = isolation
        self._timeout = timeout
        self._max_tool_calls = max_tool_calls
        self._max_event_bytes = max_event_bytes
        self._pool = WorkerPool(PreloadingLauncher(launcher, preload) if preload else launcher, spares)
        self._sources: list[str] = []
        self._loaded = False
        try:
            self._worker: WorkerHandle | None = self._pool.acquire()  # fail now if workers cannot start
        except BaseException:
            self._pool.close()
            raise

    @property
    def isolation(self) -> str:
        return self._isolation

    def wait_until_warm(self, timeout: float | None = None) -> None:
        self._pool.wait_until_warm(timeout)

    @property
    def worker_info(self) -> dict[str, Any]:
        """The current worker's ready message (uid, seccomp, rlimits ...), for checks and reports."""
        return dict(self._current().info)

    def load(self, sources: Sequence[str]) -> LoadResult:
        if self._loaded:
            self._replace_worker()
        self._sources = list(sources)
        self._loaded = True
        return self._load_sources(self._timeout)

    def call(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> CallResult:
        self._require_loaded()
        request = {"op": "call", "name": name, "arguments": dict(arguments)}
        return self._run(request, None, timeout)

    def execute(
        self, code: str, on_tool_call: ToolCallHook | None = None, timeout: float | None = None
    ) -> CallResult:
        self._require_loaded()
        return self._run({"op": "execute", "code": code}, on_tool_call, timeout)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
        self._pool.close()

    # ------------------------------------------------------------------------------------------- internals

    def _current(self) -> WorkerHandle:
        if self._worker is None:
            raise SandboxError("the sandbox is closed")
        return self._worker

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise SandboxError("no episode is loaded: call load(sources) before call() or execute()")

    def _replace_worker(self) -> None:
        """Kill the current worker and take a spare. If no spare can start, the killed worker stays current:
        its next use fails as a crash and tries again, so one failed start does not end the sandbox."""
        self._current().kill()
        self._worker = self._pool.acquire()

    def _load_sources(self, timeout: float) -> LoadResult:
        worker = self._current()
        deadline = time.monotonic() + timeout
        try:
            request_id = worker.connection.request({"op": "load", "sources": self._sources}, deadline)
            return _loaded(worker.connection.receive(deadline, request_id))
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            reason = _describe_failure(exc, worker, timeout)
        self._sources = []
        self._replace_worker()
        return LoadResult(functions=(), errors=(f"loading failed: {reason}; no tools are loaded",))

    def _run(self, request: dict[str, Any], hook: ToolCallHook | None, timeout: float | None) -> CallResult:
        limit = self._timeout if timeout is None else timeout
        worker = self._current()
        started = time.monotonic()
        deadline = started + limit
        tool_calls: list[dict[str, Any]] = []
        try:
            request_id = worker.connection.request(request, deadline)
            event_bytes_left = worker.connection.bytes_received + self._max_event_bytes
            while True:
                message = worker.connection.receive(deadline, request_id)
                if message["type"] == "result":
                    return _result(message, tool_calls, started)
                if request["op"] != "execute" or message["type"] not in ("tool_call", "tool_done"):
                    raise WorkerProtocolError(f"unexpected message {message['type']!r} during a call")
                if worker.connection.bytes_received > event_bytes_left:
                    raise _StepLimitError(
                        f"the tool calls of one code block sent over {self._max_event_bytes} bytes"
                    )
                if message["type"] == "tool_done":
                    _finish_tool_call(message, tool_calls)
                    continue
                if len(tool_calls) >= self._max_tool_calls:
                    raise _StepLimitError(f"the code made more than {self._max_tool_calls} tool calls")
                refusal = _ask_hook(hook, message, tool_calls)
                worker.connection.send({"op": "tool_reply", "id": request_id, "error": refusal}, deadline)
        except (WorkerTimeoutError, WorkerCrashedError, _StepLimitError) as exc:
            status = _failure_status(exc, worker)
            error = _describe_failure(exc, worker, limit)
        except BaseException:
            self._recover()  # the worker is mid-protocol (e.g. the host hook raised): it cannot be reused
            raise
        for record in tool_calls:
            if record["status"] == "pending":
                record.update(status=status, error=error)
        try:
            self._recover()
        except SandboxError as exc:  # no replacement could start: this call still comes back as a result
            error = f"{error}; starting a replacement failed: {exc}"
        return CallResult(
            status=status,
            error=error,
            latency_ms=(time.monotonic() - started) * 1000,
            tool_calls=tuple(tool_calls),
        )

    def _recover(self) -> None:
        """Replace the current worker and reload the episode's sources into the replacement."""
        self._replace_worker()
        self._load_sources(self._timeout)


class _StepLimitError(SandboxError):
    """A code block went past the host's cap on tool calls or their bytes."""


class PreloadingLauncher(Launcher):
    """Runs shared sources (e.g. a large data set) in each worker before the pool hands it out, so warm
    spares already hold them and an episode's ``load`` costs only its own sources."""

    def __init__(self, launcher: Launcher, sources: Sequence[str], timeout: float = 120.0) -> None:
        self._launcher = launcher
        self._sources = list(sources)
        self._timeout = timeout

    def start(self) -> WorkerHandle:
        worker = self._launcher.start()
        deadline = time.monotonic() + self._timeout
        try:
            request_id = worker.connection.request({"op": "preload", "sources": self._sources}, deadline)
            reply = worker.connection.receive(deadline, request_id)
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            reason = _describe_failure(exc, worker, self._timeout)
            worker.kill()
            raise SandboxError(f"preloading the sandbox worker failed: {reason}") from exc
        if reply["type"] != "preloaded" or reply.get("errors"):
            worker.kill()
            problem = str(reply.get("errors") or reply)[:2000]
            raise SandboxError(f"preloading the sandbox worker failed: {problem}")
        return worker


def _loaded(reply: dict[str, Any]) -> LoadResult:
    """The load reply as a :class:`LoadResult`; any other shape breaks the protocol."""
    functions, errors = reply.get("functions"), reply.get("errors")
    if reply["type"] != "loaded" or not _is_text_list(functions) or not _is_text_list(errors):
        raise WorkerProtocolError(f"the worker answered load with a malformed {reply['type']!r} message")
    return LoadResult(functions=tuple(functions), errors=tuple(errors))


def _is_text_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _ask_hook(
    hook: ToolCallHook | None, message: dict[str, Any], tool_calls: list[dict[str, Any]]
) -> str | None:
    name, arguments = message.get("name"), message.get("arguments")
    if not isinstance(name, str):
        raise WorkerProtocolError("the worker sent a tool call without a function name")
    refusal = hook(name, arguments) if hook is not None else None
    tool_calls.append(
        {
            "name": name,
            "arguments": arguments,
            "status": "refused" if refusal is not None else "pending",
            "value": None,
            "error": refusal,
        }
    )
    return refusal


def _finish_tool_call(message: dict[str, Any], tool_calls: list[dict[str, Any]]) -> None:
    """Record the outcome of the pending tool call; one without a pending call breaks the protocol."""
    status, error = message.get("status"), message.get("error")
    if not tool_calls or tool_calls[-1]["status"] != "pending":
        raise WorkerProtocolError("the worker reported the outcome of a tool call that was not made")
    if status not in _STATUSES or not (error is None or isinstance(error, str)):
        raise WorkerProtocolError("the worker reported a tool call's outcome in a malformed message")
    tool_calls[-1].update(status=status, value=message.get("value"), error=error)


def _result(message: dict[str, Any], tool_calls: list[dict[str, Any]], started: float) -> CallResult:
    status, stdout, error = message.get("status"), message.get("stdout"), message.get("error")
    if (
        status not in _STATUSES
        or not (error is None or isinstance(error, str))
        or not isinstance(stdout, str)
        or not isinstance(message.get("truncated"), bool)
    ):
        raise WorkerProtocolError("the worker sent a malformed result message")
    return CallResult(
        status=status,
        value=message.get("value"),
        error=error,
        stdout=stdout,
        truncated=message["truncated"],
        latency_ms=(time.monotonic() - started) * 1000,
        tool_calls=tuple(tool_calls),
    )


def _failure_status(exc: Exception, worker: WorkerHandle) -> CallStatus:
    if isinstance(exc, WorkerTimeoutError):
        return "timeout"
    if isinstance(exc, _StepLimitError):
        return "resource_limit"
    if isinstance(exc, WorkerProtocolError):
        return "error"
    return _crash_status(worker)


def _crash_status(worker: WorkerHandle) -> CallStatus:
    exit_code = _wait_exit(worker)
    killed_by = -exit_code if exit_code is not None and exit_code < 0 else None
    return "resource_limit" if killed_by in _RESOURCE_SIGNALS else "error"


def _wait_exit(worker: WorkerHandle, patience: float = 0.5) -> int | None:
    """The exit code of a worker whose output just ended (it may need a moment to be reaped)."""
    give_up = time.monotonic() + patience
    while (code := worker.exit_status()) is None and time.monotonic() < give_up:
        time.sleep(0.005)
    return code


def _describe_failure(exc: Exception, worker: WorkerHandle, timeout: float) -> str:
    if isinstance(exc, WorkerTimeoutError):
        return f"wall-clock timeout after {timeout:g} s; the worker was killed and replaced"
    if isinstance(exc, _StepLimitError):
        return f"{exc}; the worker was killed and replaced"
    if isinstance(exc, WorkerProtocolError):
        return f"the worker broke the protocol ({exc}); it was killed and replaced"
    exit_code = _wait_exit(worker)
    if exit_code is not None and exit_code < 0:
        name = (
            signal.Signals(-exit_code).name if -exit_code in signal.Signals._value2member_map_ else exit_code
        )
        return f"the worker died ({name}: {exc}); it was replaced"
    return f"the worker failed ({exc}; exit code {exit_code}); it was replaced"
