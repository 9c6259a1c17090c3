"""The ``process`` backend: pooled worker processes under bubblewrap or raw namespaces on this machine."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import threading
import warnings
from typing import TYPE_CHECKING, Any

from hopgym.errors import ConfigError, IsolationUnavailableError, SandboxError
from hopgym.sandbox import kernelfiles
from hopgym.sandbox.cgroups import CgroupPlan, resolve_cgroups
from hopgym.sandbox.isolation import (
    WORKER_ENVIRONMENT,
    IsolationPlan,
    resolve_isolation,
    worker_command,
    worker_view,
)
from hopgym.sandbox.limits import LimitOptions, SandboxLimits, cgroup_memory_bytes, check_policy
from hopgym.sandbox.pool import Launcher, WorkerHandle, await_ready, check_hardening
from hopgym.sandbox.pooled import PooledSandbox
from hopgym.sandbox.protocol import PipeWriter, WorkerConnection, ready, reply_cap

STARTS = ("auto", "spawn", "fork")
"""How each worker starts: a new interpreter under a new bwrap (``spawn``), or forked from a warm template
(``fork``, see :mod:`hopgym.sandbox.forkserver`; root only, bwrap or namespaces); ``auto``: ``fork`` where
it can work, else ``spawn``, saying why in a log record and in the report (``start_fallback``)."""
if TYPE_CHECKING:
    from typing_extensions import Unpack
_log = logging.getLogger(__name__)
_FALLBACKS_LOGGED: set[str] = set()
_BWRAP_SIGNAL_BASE = 128
"""bubblewrap exits with 128 + n when the sandboxed worker was killed by signal n."""


class ProcessLauncher(Launcher):
    """Starts ``worker.py`` as a child process (under bwrap unless the plan says otherwise), in its own
    cgroup when ``cgroups`` plans one."""

    def __init__(
        self,
        plan: IsolationPlan,
        limits: SandboxLimits,
        policy: str | None,
        cgroups: CgroupPlan,
    ) -> None:
        self._plan = plan
        self._cgroups = cgroups
        self._command = worker_command(plan, limits, policy)
        self._reply_cap = reply_cap(limits.result_cap, limits.output_cap)
        self._start_timeout = limits.start_timeout
        self._reaper = Reaper()

    def start(self) -> WorkerHandle:
        try:
            cgroup = self._cgroups.create()
        except OSError as exc:
            raise SandboxError(f"creating the worker's cgroup failed: {exc}") from exc
        process = subprocess.Popen(
            cgroup.join_command(self._command) if cgroup else self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=WORKER_ENVIRONMENT,
            start_new_session=True,
            close_fds=True,
        )
        stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
        assert stdin is not None and stdout is not None and stderr is not None  # all three are pipes
        connection = PausingConnection(stdout, PipeWriter(stdin), self._reply_cap)
        worker_pidfd: list[int] = []
        killed = False

        def kill() -> None:
            """SIGKILL the launched process group and the worker now; the reaper finishes the rest."""
            nonlocal killed
            if killed:
                return
            killed = True
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            connection.pause_pidfd = None  # the reaper closes it: nothing may signal through its number
            for pidfd in worker_pidfd:  # the worker is in a session of its own (bwrap --new-session)
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            self._reaper.put(finish)

        def finish() -> None:
            if cgroup is not None:
                cgroup.kill()
            process.wait()
            if cgroup is not None:
                cgroup.remove()
            for pidfd in worker_pidfd:
                os.close(pidfd)
            connection.close()
            stderr.close()

        try:
            info = await_ready(connection, self._start_timeout)
            check_hardening(info, drops_root=self._plan.drops_root, seccomp=self._plan.seccomp)
            pid = worker_pid(process.pid, info)
            worker_pidfd.append(os.pidfd_open(pid))
            # Opened after the pid was found: checked again below our own child (never reaped until
            # finish), and alive, so the pidfd is the worker's, not a process that took a freed pid.
            if worker_pid(process.pid, info) != pid or exited(worker_pidfd[0]):
                raise SandboxError(f"the sandbox worker {pid} exited while it started")
            connection.pause_pid, connection.pause_pidfd = pid, worker_pidfd[0]
        except (SandboxError, OSError) as exc:
            kill_and_report = _stderr_after_kill(process, kill)
            raise SandboxError(f"{exc}{kill_and_report}") from exc
        return WorkerHandle(connection, info, kill, lambda: self._exit_code(process))

    def close(self) -> None:
        """Finish every killed worker (see :class:`Reaper`)."""
        self._reaper.close()

    def _exit_code(self, process: subprocess.Popen) -> int | None:
        code = process.poll()
        if code is not None and self._plan.level == "bwrap" and code > _BWRAP_SIGNAL_BASE:
            return _BWRAP_SIGNAL_BASE - code
        return code


class Reaper:
    """Finishes killed workers off the episode's path: waits until their processes are gone, empties and
    removes their cgroup, closes their pipes. What the next episode relies on is already done by then:
    the old worker has SIGKILL pending (it runs no more code) and shares no namespace, file or pipe with
    the new one."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="hopgym-worker-reaper", daemon=True)
        self._thread.start()

    def put(self, finish) -> None:
        self._queue.put(finish)

    def close(self) -> None:
        """Finish every queued worker, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (finish := self._queue.get()) is not None:
            try:
                finish()
            except OSError as exc:  # one worker left behind must not leave every later one unfinished
                warnings.warn(f"finishing a killed sandbox worker failed: {exc}", stacklevel=1)


class PausingConnection(WorkerConnection):
    """Stops the worker (SIGSTOP stops every thread of it) once it has answered a request, and continues it
    once the next one is written: threads that tool code leaves running cannot burn CPU between calls.

    The request is written while the worker is still stopped (a stopped reader is not woken by the write),
    so that SIGCONT is the worker's only wake-up; continued first, it would wake, find no input yet and
    sleep again until the write."""

    FINAL = frozenset({"result", "loaded", "pong"})
    """Messages after which the worker waits for the host's next request."""

    pause_pid: int | None = None
    """The worker's pid on the host, once it is ready (for reports: the pause signals through the pidfd)."""
    pause_pidfd: int | None = None
    """A pidfd of the worker, opened while it was known alive; the pause signals only through it, so once
    the worker is gone (its pid free for another process) a signal fails instead of reaching another."""
    _paused = False

    def _input_ready(self) -> None:
        if self._paused:
            self._signal(signal.SIGCONT)
            self._paused = False

    def receive(self, deadline: float, request_id: str | None = None) -> dict[str, Any]:
        message = super().receive(deadline, request_id)
        if message["type"] in self.FINAL and self.pause_pidfd is not None:
            self._paused = self._signal(signal.SIGSTOP)
        return message

    def _signal(self, number: int) -> bool:
        if self.pause_pidfd is None:  # not ready yet, so never paused
            return False
        try:
            signal.pidfd_send_signal(self.pause_pidfd, number)
        except ProcessLookupError:  # it died: the next read or write says so
            return False
        return True


def exited(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has exited (a pidfd is readable from then on)."""
    return ready(pidfd, 0)


def worker_pid(pid: int, info: dict[str, Any]) -> int:
    """The host pid of the worker that reported ``info``: the end of the chain of only children below the
    launched process (bubblewrap, or the namespaces mode's relays), checked against the worker's own pid."""
    while children := kernelfiles.read(f"/proc/{pid}/task/{pid}/children").split():
        if len(children) != 1:
            raise SandboxError(f"the sandbox worker's process {pid} has {len(children)} children, not one")
        pid = int(children[0])
    namespace_pids = namespace_pid_chain(pid)
    if namespace_pids[-1] != info.get("pid"):
        raise SandboxError(f"the sandbox worker reports pid {info.get('pid')}, found {namespace_pids}")
    return pid


def namespace_pid_chain(pid: int) -> list[int]:
    """The host process ``pid``'s pid in each PID namespace it is in, outermost (the host's) first."""
    status = kernelfiles.read(f"/proc/{pid}/status")
    start = status.index("\nNSpid:") + len("\nNSpid:")
    return [int(value) for value in status[start : status.index("\n", start)].split()]


def _stderr_after_kill(process: subprocess.Popen, kill) -> str:
    process.kill()
    assert process.stderr is not None  # started with stderr=PIPE
    text = process.stderr.read().decode(errors="replace").strip()
    kill()
    return f"\nworker stderr:\n{text[-2000:]}" if text else ""


class ProcessSandbox(PooledSandbox):
    """Tool code in pooled worker processes; see :mod:`hopgym.sandbox.isolation` for the levels.

    ``isolation``: ``auto`` (bwrap, else raw namespaces), ``bwrap``, ``namespaces`` or ``none``;
    ``seccomp=False`` and ``isolation="none"`` are explicit requests for less. ``policy="restricted"`` adds
    RestrictedPython inside the worker. ``options``: the limits of :class:`LimitOptions` (``timeout``,
    ``memory_mb`` ...; defaults: :class:`SandboxLimits`').
    ``cgroup``: ``auto``, ``v2``, ``v1`` or ``none`` (rlimits only, explicitly); each worker's group allows
    ``max_tasks`` tasks and the memory of :func:`cgroup_memory_bytes` (see :mod:`hopgym.sandbox.cgroups`).
    ``start``: ``fork`` (forked from a warm template with the same isolation; see
    :mod:`hopgym.sandbox.forkserver`), ``spawn`` (a new interpreter per worker) or ``auto`` (``fork`` where
    it can work: root and isolation ``bwrap`` or ``namespaces``; else ``spawn``, logged and reported).
    Not thread-safe: use one sandbox per concurrently running episode.
    """

    def __init__(
        self,
        isolation: str = "auto",
        seccomp: bool = True,
        policy: str | None = None,
        spares: int = 1,
        cgroup: str = "auto",
        max_tasks: int = 64,
        start: str = "auto",
        **options: Unpack[LimitOptions],
    ) -> None:
        check_policy(policy)
        limits = SandboxLimits.of(max_tasks=max_tasks, **options)
        plan = resolve_isolation(isolation, seccomp)
        start, fallback = _resolve_start(start, plan)
        cgroups = resolve_cgroups(cgroup, limits.max_tasks, cgroup_memory_bytes(limits))
        described = "+".join(filter(None, [plan.describe(), cgroups.describe()]))
        described += "+restricted" if policy else ""
        self._report = {
            "level": plan.level,
            "seccomp": plan.seccomp,
            "policy": policy,
            "rlimits": limits.rlimits(),
            "cgroup": cgroups.report(),
            "view": worker_view(policy).report() if plan.level != "none" else "the host's files",
            "paused_between_calls": True,
            "start": start,
            **({"start_fallback": fallback} if fallback else {}),
        }
        launcher = _launcher(start, plan, limits, policy, cgroups)
        self._launcher = launcher
        try:
            super().__init__(launcher, described, spares=spares, limits=limits)
        except BaseException:
            launcher.close()
            raise

    @property
    def report(self) -> dict[str, Any]:
        """What is in force, in detail: level, seccomp, rlimits, the cgroup's limits, the mounted view."""
        return dict(self._report)

    def close(self) -> None:
        super().close()
        self._launcher.close()


def _resolve_start(start: str, plan: IsolationPlan) -> tuple[str, str | None]:
    """The start mode in force and, when ``auto`` falls back to ``spawn``, why (also logged)."""
    if start not in STARTS:
        raise ConfigError(f"start={start!r} is not a start mode; valid: {', '.join(STARTS)}")
    problem = _fork_problem(plan)
    if start == "fork" and problem:
        raise IsolationUnavailableError(
            f"start='fork' needs {problem}: the template gives each worker its own namespaces; "
            "or pass start='spawn'"
        )
    if start != "auto":
        return start, None
    if problem:
        reason = f"start='fork' needs {problem}"
        if reason not in _FALLBACKS_LOGGED:  # once per process: a vector env starts many sandboxes
            _FALLBACKS_LOGGED.add(reason)
            _log.warning("sandbox workers start as new interpreters (start='spawn'): %s", reason)
        return "spawn", reason
    return "fork", None


def _fork_problem(plan: IsolationPlan) -> str | None:
    """What keeps ``start="fork"`` from working here, or None."""
    if plan.level == "none" or os.geteuid() != 0:
        return f"root and isolation 'bwrap' or 'namespaces' (got {plan.level!r}, uid {os.geteuid()})"
    return None


def _launcher(
    start: str, plan: IsolationPlan, limits: SandboxLimits, policy: str | None, cgroups: CgroupPlan
) -> Launcher:
    if start == "fork":
        from hopgym.sandbox.forkserver import ForkingLauncher  # it builds on this module

        return ForkingLauncher(plan, limits, policy, cgroups)
    return ProcessLauncher(plan, limits, policy, cgroups)
