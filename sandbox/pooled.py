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

from hopgym.errors import SandboxError, WorkerCrashedError, WorkerTimeoutError
from hopgym.sandbox.base import CallResult, CallStatus, LoadResult, Sandbox, ToolCallHook
from hopgym.sandbox.pool import Launcher, WorkerHandle, WorkerPool

_STATUSES: tuple[CallStatus, ...] = ("ok", "error", "timeout", "resource_limit")
_RESOURCE_SIGNALS = {signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL}
"""Deaths by these signals are limits (CPU seconds, file size, the kernel's OOM killer), not tool bugs."""


class PooledSandbox(Sandbox):
    """A :class:`Sandbox` over a :class:`WorkerPool`; backends differ only in their launcher."""

    def __init__(
        self,
        launcher: Launcher,
        isolation: str,
        timeout: float = 5.0,
        spares: int = 1,
        preload: Sequence[str] = (),
    ) -> None:
        if timeout <= 0:
            raise SandboxError(f"timeout must be positive seconds, got {timeout!r}")
        self._isolation = isolation
        self._timeout = timeout
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
        self._current().kill()
        self._worker = None
        self._worker = self._pool.acquire()

    def _load_sources(self, timeout: float) -> LoadResult:
        worker = self._current()
        try:
            worker.connection.send({"op": "load", "sources": self._sources})
            reply = worker.connection.receive(time.monotonic() + timeout)
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            reason = _describe_failure(exc, worker, timeout)
            self._sources = []
            self._replace_worker()
            return LoadResult(functions=(), errors=(f"loading failed: {reason}; no tools are loaded",))
        if reply["type"] != "loaded":
            self._replace_worker()
            raise SandboxError(f"sandbox worker answered load with {reply['type']!r}: {reply.get('error')}")
        return LoadResult(
            functions=tuple(str(name) for name in reply.get("functions", ())),
            errors=tuple(str(error) for error in reply.get("errors", ())),
        )

    def _run(self, request: dict[str, Any], hook: ToolCallHook | None, timeout: float | None) -> CallResult:
        limit = self._timeout if timeout is None else timeout
        worker = self._current()
        started = time.monotonic()
        deadline = started + limit
        tool_calls: list[dict[str, Any]] = []
        try:
            worker.connection.send(request)
            while True:
                message = worker.connection.receive(deadline)
                if message["type"] == "result":
                    return _result(message, tool_calls, started)
                if message["type"] == "tool_call":
                    refusal = _ask_hook(hook, message, tool_calls)
                    worker.connection.send({"op": "tool_reply", "error": refusal})
                elif message["type"] == "tool_done" and tool_calls:
                    tool_calls[-1].update(
                        status=message.get("status"), value=message.get("value"), error=message.get("error")
                    )
                else:
                    raise WorkerCrashedError(f"unexpected message {message['type']!r} during a call")
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            status: CallStatus = "timeout" if isinstance(exc, WorkerTimeoutError) else _crash_status(worker)
            error = _describe_failure(exc, worker, limit)
        except BaseException:
            self._recover()  # the worker is mid-protocol (e.g. the host hook raised): it cannot be reused
            raise
        for record in tool_calls:
            if record["status"] == "pending":
                record.update(status=status, error=error)
        self._recover()
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


class PreloadingLauncher(Launcher):
    """Runs shared sources (e.g. a large data set) in each worker before the pool hands it out, so warm
    spares already hold them and an episode's ``load`` costs only its own sources."""

    def __init__(self, launcher: Launcher, sources: Sequence[str], timeout: float = 120.0) -> None:
        self._launcher = launcher
        self._sources = list(sources)
        self._timeout = timeout

    def start(self) -> WorkerHandle:
        worker = self._launcher.start()
        try:
            worker.connection.send({"op": "preload", "sources": self._sources})
            reply = worker.connection.receive(time.monotonic() + self._timeout)
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            reason = _describe_failure(exc, worker, self._timeout)
            worker.kill()
            raise SandboxError(f"preloading the sandbox worker failed: {reason}") from exc
        if reply["type"] != "preloaded" or reply.get("errors"):
            worker.kill()
            raise SandboxError(f"preloading the sandbox worker failed: {reply.get('errors') or reply}")
        return worker


def _ask_hook(
    hook: ToolCallHook | None, message: dict[str, Any], tool_calls: list[dict[str, Any]]
) -> str | None:
    name, arguments = str(message.get("name")), message.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
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


def _result(message: dict[str, Any], tool_calls: list[dict[str, Any]], started: float) -> CallResult:
    status = message.get("status")
    stdout, error = message.get("stdout"), message.get("error")
    return CallResult(
        status=status if status in _STATUSES else "error",
        value=message.get("value"),
        error=None if error is None else str(error),
        stdout=stdout if isinstance(stdout, str) else "",
        truncated=bool(message.get("truncated")),
        latency_ms=(time.monotonic() - started) * 1000,
        tool_calls=tuple(tool_calls),
    )


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
    exit_code = _wait_exit(worker)
    if exit_code is not None and exit_code < 0:
        name = (
            signal.Signals(-exit_code).name if -exit_code in signal.Signals._value2member_map_ else exit_code
        )
        return f"the worker died ({name}: {exc}); it was replaced"
    return f"the worker failed ({exc}; exit code {exit_code}); it was replaced"
