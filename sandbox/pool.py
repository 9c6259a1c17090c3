"""A pool of pre-started, hardened workers, independent of how a worker is launched.

A worker serves exactly one episode (tool code can patch builtins or ``sys.modules``, so a used worker is
never trusted again); the pool keeps ``spares`` workers warm so that starting an episode costs one
hand-over, not one interpreter start. Backends supply a :class:`Launcher`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hopgym.errors import SandboxError, WorkerCrashedError, WorkerTimeoutError
from hopgym.sandbox.protocol import WorkerConnection
from hopgym.sandbox.wire import PROTOCOL_VERSION


@dataclass
class WorkerHandle:
    """A started worker that has reported ``ready``."""

    connection: WorkerConnection
    info: dict[str, Any]
    """The worker's ready message: pid, uid, seccomp, rlimits, policy."""
    kill: Callable[[], None]
    """Stop the worker and everything it started, at once; safe to call twice."""
    exit_status: Callable[[], int | None]
    """The worker's exit code once it has exited (negative: killed by that signal), else None."""


class Launcher(ABC):
    """Starts one hardened worker (under bwrap, namespaces, a container ...)."""

    @abstractmethod
    def start(self) -> WorkerHandle:
        """Start a worker and wait for its ready message; raise SandboxError if it cannot start."""

    def close(self) -> None:
        """Stop what the launcher keeps besides its workers (a fork-server); nothing by default."""
        return


def await_ready(connection: WorkerConnection, timeout: float) -> dict[str, Any]:
    """Read the worker's first message and check that it is a ready message of our protocol version."""
    try:
        message = connection.receive(time.monotonic() + timeout)
    except (WorkerCrashedError, WorkerTimeoutError) as exc:
        raise SandboxError(f"sandbox worker did not start: {exc}") from exc
    if message["type"] == "fatal":
        raise SandboxError(f"sandbox worker could not harden itself: {message.get('error')}")
    if message["type"] != "ready" or message.get("version") != PROTOCOL_VERSION:
        raise SandboxError(
            f"sandbox worker speaks another protocol (expected version {PROTOCOL_VERSION}): {message}"
        )
    return message


def check_hardening(info: dict[str, Any], *, drops_root: bool, seccomp: bool) -> None:
    """Refuse a worker whose ready message reports weaker hardening than its launcher planned (never
    silently downgraded): still root where it should have dropped to an unprivileged uid, or a seccomp
    filter other than planned."""
    if drops_root and info.get("uid") in (0, None):
        raise SandboxError(f"the sandbox worker runs as uid {info.get('uid')} after dropping privileges")
    if info.get("seccomp") is not seccomp:
        raise SandboxError(f"the sandbox worker reports seccomp={info.get('seccomp')}, planned {seccomp}")


class WorkerPool:
    """Keeps ``spares`` ready workers; :meth:`acquire` hands one over and background threads refill,
    one per spare, so that on a multi-core machine several workers start at once."""

    def __init__(self, launcher: Launcher, spares: int = 1) -> None:
        self._launcher = launcher
        self._spares = spares
        self._ready: deque[WorkerHandle] = deque()
        self._condition = threading.Condition()
        self._starting = 0
        self._deferred = 0
        """Blocks of :meth:`refill_deferred` running with a spare in hand: no new start meanwhile."""
        self._waiting = 0
        self._error: SandboxError | None = None
        self._closed = False
        self._refillers = [
            threading.Thread(target=self._refill, name=f"hopgym-worker-pool-{index}", daemon=True)
            for index in range(spares)
        ]
        for refiller in self._refillers:
            refiller.start()

    def acquire(self) -> WorkerHandle:
        """A fresh, never-used worker; the caller owns it and must ``kill`` it when done."""
        if self._spares == 0:
            return self._launcher.start()
        with self._condition:
            while not self._ready and self._error is None and not self._closed:
                self._waiting += 1  # a deferred refill goes on: someone waits for a spare
                self._condition.notify_all()
                self._condition.wait()
                self._waiting -= 1
            if self._closed:
                raise SandboxError("the sandbox is closed")
            if self._error is not None:
                error, self._error = self._error, None
                self._condition.notify_all()
                raise error
            worker = self._ready.popleft()
            self._condition.notify_all()
            return worker

    @contextlib.contextmanager
    def refill_deferred(self) -> Iterator[bool]:
        """Start no new spare until the block ends, if a spare is ready when it begins (the block gets
        True): the episode that takes that spare has its first request answered without a worker starting
        beside it (on a small machine they share the cores). Without a ready spare (False) the refill goes
        on: starts are then what the caller waits for."""
        with self._condition:
            deferred = bool(self._ready)
            self._deferred += deferred
        try:
            yield deferred
        finally:
            if deferred:
                with self._condition:
                    self._deferred -= 1
                    self._condition.notify_all()

    def wait_until_warm(self, timeout: float | None = None) -> None:
        """Block until every spare is ready (each start has its own time limit, so this ends without a
        ``timeout`` too). A failed start is left for :meth:`acquire` to raise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while len(self._ready) < self._spares and self._error is None and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise SandboxError(
                        f"{self._spares - len(self._ready)} of {self._spares} spare sandbox workers "
                        f"were not ready after {timeout} s"
                    )
                self._condition.wait(remaining)

    def close(self) -> None:
        """Stop the refill threads and every spare."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            spares = list(self._ready)
            self._ready.clear()
        for worker in spares:
            worker.kill()
        for refiller in self._refillers:
            refiller.join()

    def _refill(self) -> None:
        while True:
            with self._condition:
                while not self._closed and (
                    len(self._ready) + self._starting >= self._spares
                    or self._error is not None
                    or (self._deferred and not self._waiting)
                ):
                    self._condition.wait()
                if self._closed:
                    return
                self._starting += 1
            try:
                worker = self._launcher.start()
            except Exception as exc:  # handed to acquire(); a dead refill thread would make it wait forever
                error = (
                    exc if isinstance(exc, SandboxError) else SandboxError(f"starting a worker failed: {exc}")
                )
                with self._condition:
                    self._starting -= 1
                    self._error = error
                    self._condition.notify_all()
                continue
            with self._condition:
                self._starting -= 1
                if self._closed:
                    worker.kill()
                    return
                self._ready.append(worker)
                self._condition.notify_all()
