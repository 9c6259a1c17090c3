"""Episode logic shared by every pooled backend: one fresh worker per episode, deadlines, replacement.

A call that outlives its wall-clock deadline, or a worker that dies or misbehaves, costs that worker: it is
killed, a warm spare takes its place, and the episode's sources are loaded into the spare so the episode
goes on. The failed call comes back as a :class:`CallResult` (never an exception on the host).
"""

from __future__ import annotations

import functools
import signal
import time
from binascii import b2a_base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from hopgym.errors import (
    ConfigError,
    SandboxError,
    WorkerCrashedError,
    WorkerProtocolError,
    WorkerTimeoutError,
)
from hopgym.sandbox.base import CALL_STATUSES, CallResult, CallStatus, LoadResult, Sandbox, ToolCallHook
from hopgym.sandbox.bounded import MARKER_ROOM, MAX_DEPTH, Budget, bounded
from hopgym.sandbox.limits import DEFAULT_MAX_TOOL_CALLS, SandboxLimits
from hopgym.sandbox.pool import Launcher, WorkerHandle, WorkerPool
from hopgym.sandbox.protocol import ERROR_TEXT_CAP

__all__ = ["DEFAULT_MAX_TOOL_CALLS", "PooledSandbox"]  # the cap execute() applies unless told otherwise

_RESOURCE_SIGNALS = {signal.SIGXCPU, signal.SIGXFSZ, signal.SIGKILL}
"""Deaths by these signals are limits (CPU seconds, file size, the kernel's OOM killer), not tool bugs."""


class PooledSandbox(Sandbox):
    """A :class:`Sandbox` over a :class:`WorkerPool`; backends differ only in their launcher.

    ``limits`` (see :class:`SandboxLimits`), or the options :meth:`SandboxLimits.of` takes (e.g.
    ``timeout``), bound the loads and calls; past ``max_tool_calls`` tool calls in one :meth:`execute`,
    ``max_event_bytes`` of their events, or the items, characters or depth its records may keep
    (:meth:`SandboxLimits.event_budget`), the host ends the code block and reports a resource limit, so
    that a call flood cannot pile up host memory. Every value a worker sends is bounded on the host as its
    own caps bound it (:meth:`SandboxLimits.result_budget`, :mod:`hopgym.sandbox.bounded`): a value past
    them comes back cut with a marker and ``truncated``, as the worker cuts a result past its cap.
    """

    def __init__(
        self,
        launcher: Launcher,
        isolation: str,
        spares: int = 1,
        limits: SandboxLimits | None = None,
        **options: Any,
    ) -> None:
        if spares < 0:
            raise ConfigError(f"spares={spares!r} is not a number of workers kept ready; valid: 0 or more")
        self._isolation = isolation
        self._limits = limits if limits is not None else SandboxLimits.of(**options)
        self._pool = WorkerPool(launcher, spares)
        self._sources: list[str] = []
        self._compiled: list[bytes | None] = []
        self._parameters: dict[str, list[str]] = {}
        """Each loaded function's positional parameter names, to bind a code block's calls by."""
        self._code_worker: WorkerHandle | None = None
        self._loaded = False
        """Whether the current worker was given a load (a later load then takes a fresh one)."""
        self._abandoned = False
        """Whether the last load's ``meanwhile`` raised: its worker was killed and no episode is loaded."""
        self._in_meanwhile = False
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

    def load(
        self,
        sources: Sequence[str],
        compiled: Sequence[bytes | None] | None = None,
        meanwhile: Callable[[], object] | None = None,
    ) -> LoadResult:
        if compiled is not None and len(compiled) != len(sources):
            raise SandboxError(f"{len(compiled)} compiled codes were given for {len(sources)} sources")
        self._refuse_inside_meanwhile()
        self._drop_code_worker()
        with self._pool.refill_deferred() as spare_ready:
            previous = None
            if self._loaded and spare_ready:
                previous = self._take_spare()
            elif self._loaded:  # the previous worker exits while the spare is awaited
                self._replace_worker()
            self._sources = list(sources)
            self._compiled = list(compiled) if compiled is not None else [None] * len(sources)
            self._loaded, self._abandoned = True, False
            try:
                return self._load_sources(meanwhile)
            finally:
                if previous is not None:
                    previous.kill()

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        timeout: float | None = None,
        *,
        as_json_text: bool = False,
    ) -> CallResult:
        self._require_loaded()
        limit = self._limits.call_timeout if timeout is None else timeout
        return self._call(name, dict(arguments), limit, as_json_text)

    def execute(
        self, code: str, on_tool_call: ToolCallHook | None = None, timeout: float | None = None
    ) -> CallResult:
        """The code runs in a second worker of the episode that holds no tool code; each tool call it makes
        comes to the host, which passes it to ``on_tool_call``, runs it with :meth:`call` in the episode's
        worker, records it, and sends the value back. So the records are the host's own bookkeeping."""
        self._require_loaded()
        limit = self._limits.call_timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + limit
        records: list[dict[str, Any]] = []
        kept = self._limits.event_budget()
        try:
            worker = self._code_worker_for_episode()
        except SandboxError as exc:
            return CallResult(status="error", error=f"no worker could start to run the code: {exc}")
        try:
            request = {"op": "execute", "code": code, "tools": sorted(self._parameters)}
            request_id = worker.connection.request(request, deadline)
            event_bytes_left = worker.connection.bytes_received + self._limits.max_event_bytes
            while True:
                message = worker.connection.receive(deadline, request_id)
                if message["type"] == "result":
                    return _result(message, records, started, self._limits)
                if message["type"] != "tool_call":
                    raise WorkerProtocolError(f"unexpected message {message['type']!r} while running code")
                if worker.connection.bytes_received > event_bytes_left:
                    raise _StepLimitError(
                        f"the tool calls of one code block sent over {self._limits.max_event_bytes} bytes"
                    )
                if len(records) >= self._limits.max_tool_calls:
                    raise _StepLimitError(f"the code made more than {self._limits.max_tool_calls} tool calls")
                reply = self._tool_call(message, on_tool_call, records, deadline, kept)
                worker.connection.send({"op": "tool_reply", "id": request_id, **reply}, deadline)
        except (WorkerTimeoutError, WorkerCrashedError, _StepLimitError) as exc:
            status = _failure_status(exc, worker)
            error = _describe_failure(exc, worker, limit)
        except BaseException:
            self._drop_code_worker()  # interrupted mid-protocol (e.g. the host hook raised)
            raise
        self._drop_code_worker()
        return CallResult(
            status=status,
            error=error,
            latency_ms=(time.monotonic() - started) * 1000,
            tool_calls=tuple(records),
        )

    def close(self) -> None:
        self._drop_code_worker()
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
        self._refuse_inside_meanwhile()
        if not self._loaded or self._abandoned:
            raise SandboxError("no episode is loaded: call load(sources) before call() or execute()")

    def _refuse_inside_meanwhile(self) -> None:
        if self._in_meanwhile:
            raise SandboxError("a load's meanwhile cannot use the sandbox that is loading")

    def _replace_worker(self) -> None:
        """Kill the current worker and take a spare. If no spare can start, the killed worker stays current:
        its next use fails as a crash and tries again, so one failed start does not end the sandbox."""
        self._current().kill()
        self._worker = self._pool.acquire()

    def _take_spare(self) -> WorkerHandle:
        """Make a ready spare the current worker and return the previous one, for the caller to kill once
        the spare has answered its first request, so that its exit does not compete with that request. Until
        then it stays as its last reply left it: stopped, on the process backend (``PausingConnection``).
        If the pool raises, the previous worker is killed and stays current, as in ``_replace_worker``."""
        previous = self._current()
        try:
            self._worker = self._pool.acquire()
        except BaseException:
            previous.kill()
            raise
        return previous

    def _code_worker_for_episode(self) -> WorkerHandle:
        if self._code_worker is None:
            self._current()  # a closed sandbox starts nothing
            self._code_worker = self._pool.acquire()
        return self._code_worker

    def _drop_code_worker(self) -> None:
        if self._code_worker is not None:
            self._code_worker.kill()
            self._code_worker = None

    def _load_sources(self, meanwhile: Callable[[], object] | None = None) -> LoadResult:
        worker = self._current()
        timeout = self._limits.load_timeout
        deadline = time.monotonic() + timeout
        self._parameters = {}
        request = {"op": "load", "sources": _worker_sources(worker, self._sources, self._compiled)}
        try:
            request_id = worker.connection.request(request, deadline)
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            return self._load_failed(exc, worker, timeout)
        if meanwhile is not None:
            self._run_meanwhile(meanwhile, worker)
        try:
            loaded, self._parameters = _loaded(worker.connection.receive(deadline, request_id))
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            return self._load_failed(exc, worker, timeout)
        return loaded

    def _load_failed(self, exc: Exception, worker: WorkerHandle, timeout: float) -> LoadResult:
        reason = _describe_failure(exc, worker, timeout)
        self._sources, self._compiled = [], []
        self._replace_worker()
        return LoadResult(functions=(), errors=(f"loading failed: {reason}; no tools are loaded",))

    def _run_meanwhile(self, meanwhile: Callable[[], object], worker: WorkerHandle) -> None:
        """Run the caller's set-up while ``worker`` loads; if it raises, there is no episode: the worker
        (its reply never read) is killed, and the next load takes a fresh one."""
        self._in_meanwhile = True
        try:
            meanwhile()
        except BaseException:
            self._sources, self._compiled, self._abandoned = [], [], True
            worker.kill()
            raise
        finally:
            self._in_meanwhile = False

    def _call(
        self, name: str, arguments: dict[str, Any], limit: float, as_json_text: bool = False
    ) -> CallResult:
        worker = self._current()
        started = time.monotonic()
        deadline = started + limit
        try:
            request: dict[str, Any] = {"op": "call", "name": name, "arguments": arguments}
            if as_json_text:
                request["as_json_text"] = True
            request_id = worker.connection.request(request, deadline)
            message = worker.connection.receive(deadline, request_id)
            if message["type"] != "result":
                raise WorkerProtocolError(f"unexpected message {message['type']!r} during a call")
            return _result(message, [], started, self._limits)
        except (WorkerTimeoutError, WorkerCrashedError) as exc:
            status = _failure_status(exc, worker)
            error = _describe_failure(exc, worker, limit)
        except BaseException:
            self._recover()  # interrupted mid-protocol: the worker cannot be reused
            raise
        try:
            self._recover()
        except SandboxError as exc:  # no replacement could start: this call still comes back as a result
            error = f"{error}; starting a replacement failed: {exc}"
        return CallResult(status=status, error=error, latency_ms=(time.monotonic() - started) * 1000)

    def _tool_call(
        self,
        message: dict[str, Any],
        hook: ToolCallHook | None,
        records: list[dict[str, Any]],
        deadline: float,
        kept: Budget,
    ) -> dict[str, Any]:
        """Validate (``hook``), run and record one tool call of a code block; the reply for the code.
        What the record keeps spends ``kept``; a call that overruns it is recorded cut and ends the block."""
        name = message.get("name")
        if not isinstance(name, str):
            raise WorkerProtocolError("the code's worker sent a tool call without a function name")
        arguments, cut = bounded(_bound_arguments(self._parameters.get(name, []), message.get("call")), kept)
        refusal = hook(name, arguments) if hook is not None else None
        if cut:
            refusal = self._event_overrun()
        elif refusal is None and not isinstance(arguments, dict):
            refusal = "the arguments of this call could not be read (too large to send?)"
        if refusal is not None:
            records.append(
                {"name": name, "arguments": arguments, "status": "refused", "value": None, "error": refusal}
                | {"truncated": cut}
            )
            if cut:
                raise _StepLimitError(refusal)
            return {"status": "refused", "error": refusal}
        remaining = deadline - time.monotonic()
        if remaining <= 0:  # recorded: the hook has seen the call, and every call it saw has a record
            error = "the code block ran out of time"
            records.append(
                {"name": name, "arguments": arguments, "status": "timeout", "value": None, "error": error}
            )
            raise WorkerTimeoutError(error)
        result = self._call(name, arguments, remaining)
        value, cut = bounded(result.value, kept)
        outcome = {"status": result.status, "value": value, "error": result.error}
        records.append(
            {"name": name, "arguments": arguments, **outcome, "truncated": result.truncated or cut}
        )
        if cut:
            raise _StepLimitError(self._event_overrun())
        return {**outcome, "stdout": result.stdout}

    def _event_overrun(self) -> str:
        budget = self._limits.event_budget()
        return (
            f"the tool calls of one code block came to more than {budget.items} items or {budget.chars} "
            f"characters of arguments and values, or nested deeper than {MAX_DEPTH} levels"
        )

    def _recover(self) -> None:
        """Replace the current worker and reload the episode's sources into the replacement."""
        self._replace_worker()
        self._load_sources()


class _StepLimitError(SandboxError):
    """A code block went past the host's cap on tool calls or their bytes."""


def _worker_sources(worker: WorkerHandle, sources: list[str], compiled: list[bytes | None]) -> list[Any]:
    """The sources as the load request carries them: host-compiled code in place of the text where the
    worker runs the bytecode it was compiled for (its ready message names it), so the worker need not
    compile; else the text."""
    magic = worker.info.get("bytecode")
    if not isinstance(magic, str) or not magic:
        return sources
    return [
        {"code": _code_text(code)} if code is not None and code[: len(magic) // 2].hex() == magic else source
        for source, code in zip(sources, compiled, strict=True)
    ]


@functools.lru_cache(maxsize=4096)
def _code_text(code: bytes) -> str:
    """Compiled code as a load request carries it (base64); kept, as every episode of a task sends the same
    code again (a bytes object keeps its hash, so a repeat costs a look-up). 4,096: the full ToolHop set."""
    return b2a_base64(code, newline=False).decode("ascii")


def _loaded(reply: dict[str, Any]) -> tuple[LoadResult, dict[str, list[str]]]:
    """The load reply as a :class:`LoadResult` and the functions' positional parameter names; any other
    shape breaks the protocol."""
    functions, errors, parameters = reply.get("functions"), reply.get("errors"), reply.get("parameters")
    if (
        reply["type"] != "loaded"
        or not _is_text_list(functions)
        or not _is_text_list(errors)
        or not isinstance(parameters, dict)
        or not all(name in functions and _is_text_list(names) for name, names in parameters.items())
    ):
        raise WorkerProtocolError(f"the worker answered load with a malformed {reply['type']!r} message")
    return LoadResult(functions=tuple(functions), errors=tuple(errors)), parameters


def _is_text_list(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _bound_arguments(positional: list[str], call: Any) -> Any:
    """A code block's ``{"args", "kwargs"}`` as arguments by name; positional arguments past the named
    parameters stay under ``"*args"`` (which validation then reports); an unreadable call stays as it is."""
    args, kwargs = (call.get("args"), call.get("kwargs")) if isinstance(call, dict) else (None, None)
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return call
    bound = dict(zip(positional, args, strict=False))
    extra = args[len(positional) :]
    return {**bound, **kwargs, **({"*args": extra} if extra else {})}


def _result(
    message: dict[str, Any], tool_calls: list[dict[str, Any]], started: float, limits: SandboxLimits
) -> CallResult:
    """The result message as a :class:`CallResult`, bounded as the worker's caps bound it (a worker that
    sends more broke them: the excess is cut here, and the result says ``truncated``)."""
    status, stdout, error = message.get("status"), message.get("stdout"), message.get("error")
    if (
        status not in CALL_STATUSES
        or not (error is None or isinstance(error, str))
        or not isinstance(stdout, str)
        or not isinstance(message.get("truncated"), bool)
    ):
        raise WorkerProtocolError("the worker sent a malformed result message")
    value, value_cut = bounded(message.get("value"), limits.result_budget())
    stdout, stdout_cut = bounded(stdout, Budget(items=0, chars=limits.output_cap + MARKER_ROOM))
    if error is not None:
        error, _ = bounded(error, Budget(items=0, chars=ERROR_TEXT_CAP + MARKER_ROOM))
    return CallResult(
        status=status,
        value=value,
        error=error,
        stdout=stdout,
        truncated=message["truncated"] or value_cut or stdout_cut,
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
