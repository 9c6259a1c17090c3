"""Sandbox workers started as new processes: ``worker.py`` as a child, under bwrap unless the plan says
otherwise (``start="spawn"``), with what the fork server's workers share (the pausing connection, the
reaper, finding the worker's host pid below the launched process)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import warnings
from typing import Any

from hopgym.errors import SandboxError
from hopgym.sandbox import kernelfiles
from hopgym.sandbox.cgroups import CgroupPlan, WorkerCgroup
from hopgym.sandbox.isolation import WORKER_ENVIRONMENT, IsolationPlan, worker_command
from hopgym.sandbox.limits import SandboxLimits
from hopgym.sandbox.pool import Launcher, WorkerHandle, await_ready, check_hardening
from hopgym.sandbox.protocol import PipeWriter, WorkerConnection, ready, reply_cap

_BWRAP_SIGNAL_BASE = 128
"""bubblewrap exits with 128 + n when the sandboxed worker was killed by signal n."""


class HostLauncher(Launcher):
    """What the process backend's launchers share: the isolation plan, each worker's own cgroup, the reply
    cap, the start deadline and the reaper of killed workers."""

    def __init__(self, plan: IsolationPlan, limits: SandboxLimits, cgroups: CgroupPlan) -> None:
        self._plan = plan
        self._cgroups = cgroups
        self._reply_cap = reply_cap(limits.result_cap, limits.output_cap)
        self._start_timeout = limits.start_timeout
        self._reaper = Reaper()

    def _new_cgroup(self) -> WorkerCgroup | None:
        """The next worker's cgroup (None when the plan has none)."""
        try:
            return self._cgroups.create()
        except OSError as exc:
            raise SandboxError(f"creating the worker's cgroup failed: {exc}") from exc


class ProcessLauncher(HostLauncher):
    """Starts ``worker.py`` as a child process (under bwrap unless the plan says otherwise), in its own
    cgroup when ``cgroups`` plans one."""

    def __init__(
        self,
        plan: IsolationPlan,
        limits: SandboxLimits,
        policy: str | None,
        cgroups: CgroupPlan,
    ) -> None:
        super().__init__(plan, limits, cgroups)
        self._command = worker_command(plan, limits, policy)

    def start(self) -> WorkerHandle:
        cgroup = self._new_cgroup()
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
