"""``start="fork"``: fresh workers forked from a warm template instead of a new interpreter per episode.

One template process per sandbox runs ``worker.py`` in template mode (see ``template.serve_template``) under
the same bwrap view or raw namespaces as a spawned worker. It never runs untrusted code. For each worker
the host sends it a fork request carrying the worker's own pipes over a Unix socket; the fork is the
worker, PID 1 of a new PID namespace (so it cannot see or signal the template or its siblings) with its own
mount and IPC namespaces and a fresh /tmp, /proc and /dev/pts; it applies the rlimits, drops to nobody and
loads the seccomp filter as a spawned worker does (its CPU limit is the kernel's SIGKILL: an init ignores a
default-action SIGXCPU; see ``hardening.apply_rlimits``), before saying ``ready``. The template reaps it and
writes its exit code to its exit-status pipe. The host moves the worker into its own cgroup before any
request (so before any untrusted code) and holds a pidfd of it to kill it without pid reuse races; it
changes a worker's scheduling through the template, whose unreaped child cannot have lost its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any, NamedTuple

from hopgym.errors import SandboxError
from hopgym.sandbox import kernelfiles
from hopgym.sandbox.cgroups import CgroupPlan, WorkerCgroup
from hopgym.sandbox.isolation import WORKER_ENVIRONMENT, IsolationPlan, worker_command
from hopgym.sandbox.launcher import (
    HostLauncher,
    PausingConnection,
    Reaper,
    exited,
    namespace_pid_chain,
    worker_pid,
)
from hopgym.sandbox.limits import SandboxLimits
from hopgym.sandbox.pool import WorkerHandle, await_ready, check_hardening
from hopgym.sandbox.protocol import PipeWriter, ready
from hopgym.sandbox.wire import PROTOCOL_VERSION

_CONTROL_MESSAGE_BYTES = 4096
_IDLE_EXIT_SECONDS = 0.02
"""At most how long a killed worker exits at idle priority (see ``_ForkedWorker.kill``), counted from when
the reaper turns to it: about the next episode's start."""
_CHILD_LOOKUP_SECONDS = 1.0
"""How long a forked child may stay missing from its parent's list of children before it counts as gone."""


class Forked(NamedTuple):
    """A worker as the fork-server forked it: its host pid, the template's number for the fork, and the
    template's start count (a restarted template numbers its forks from 1 again)."""

    pid: int
    fork: int
    generation: int


class ForkServer:
    """The template process and its control socket; started on first use, started again if it died.
    Fork requests are serialised (one socket), each takes well under a millisecond of the template."""

    def __init__(self, command: list[str], start_timeout: float) -> None:
        self._command = command
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._host_pid = 0
        self._generation = 0

    def fork(self, fds: list[int], timeout: float) -> Forked:
        """Fork a worker holding ``fds`` as its stdin, stdout and stderr (the template keeps the fourth, its
        exit-status pipe); the worker is PID 1 of its namespace."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            assert self._control is not None
            try:
                socket.send_fds(self._control, [b"fork"], fds)
                reply = self._receive(time.monotonic() + timeout)
            except (OSError, SandboxError) as exc:
                self._stop()
                raise SandboxError(f"the sandbox's fork-server failed: {exc}") from exc
            if reply.get("type") != "forked" or not all(
                isinstance(reply.get(key), int) for key in ("pid", "fork")
            ):
                raise SandboxError(f"the sandbox's fork-server could not fork a worker: {reply.get('error')}")
            return Forked(self._host_pid_of(reply["pid"]), reply["fork"], self._generation)

    def schedule(self, worker: Forked, policy: int, priority: int) -> tuple[int, int] | None:
        """Set ``worker``'s scheduling policy and priority while the template has not reaped it (race-free:
        see ``template._schedule``); the policy and priority it had, None once it is gone (or its template).
        A template that does not answer in time is stopped, as after a failed fork: a late answer would
        be read as the next fork's."""
        with self._lock:
            if worker.generation != self._generation or self._control is None:
                return None
            request = {"op": "schedule", "fork": worker.fork, "policy": policy, "priority": priority}
            try:
                self._control.send(json.dumps(request).encode())
                reply = self._receive(time.monotonic() + self._start_timeout)
            except (OSError, SandboxError):
                self._stop()
                return None
            had = reply.get("had")
            if reply.get("type") != "scheduled" or not isinstance(had, list) or len(had) != 2:
                return None
            return int(had[0]), int(had[1])

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _start(self) -> None:
        self._stop()
        self._generation += 1
        host_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                self._command,
                stdin=template_end.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=WORKER_ENVIRONMENT,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            template_end.close()
        self._control = host_end
        try:
            ready = self._receive(time.monotonic() + self._start_timeout)
            if ready.get("type") != "template" or ready.get("version") != PROTOCOL_VERSION:
                raise SandboxError(f"the fork-server did not start: {ready}")
            self._host_pid = worker_pid(self._process.pid, ready)
        except (OSError, SandboxError) as exc:
            stderr = self._stop()
            raise SandboxError(f"the sandbox's fork-server did not start: {exc}{stderr}") from exc

    def _receive(self, deadline: float) -> dict[str, Any]:
        assert self._control is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not ready(self._control.fileno(), remaining):
            raise SandboxError("the fork-server did not answer in time")
        data = self._control.recv(_CONTROL_MESSAGE_BYTES)
        if not data:
            raise SandboxError("the fork-server exited")
        message = json.loads(data)
        if not isinstance(message, dict):
            raise SandboxError(f"the fork-server wrote {data[:200]!r}")
        return message

    def _host_pid_of(self, template_pid: int) -> int:
        """The host pid of the template's child whose pid in the template's namespace is ``template_pid``.

        The kernel's list of a process's children can skip one while another child exits during the read
        (an earlier episode's worker, killed at the same time): read again until it shows up."""
        give_up = time.monotonic() + _CHILD_LOOKUP_SECONDS
        while True:
            children = kernelfiles.read(f"/proc/{self._host_pid}/task/{self._host_pid}/children").split()
            for child in reversed(children):  # the newest child is listed last
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    if namespace_pid_chain(int(child))[-2] == template_pid:
                        return int(child)
            if time.monotonic() > give_up:
                raise SandboxError(f"the fork-server's child {template_pid} is gone")
            time.sleep(0.001)

    def _stop(self) -> str:
        """Kill the template (its workers die with it); what it wrote to stderr, for error messages."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is None:
            return ""
        process, self._process = self._process, None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        assert process.stderr is not None  # started with stderr=PIPE
        text = process.stderr.read().decode(errors="replace").strip()
        process.stderr.close()
        return f"\nfork-server stderr:\n{text[-2000:]}" if text else ""


class ForkingLauncher(HostLauncher):
    """Starts each worker by a fork of the sandbox's template (see the module's docstring)."""

    def __init__(
        self,
        plan: IsolationPlan,
        limits: SandboxLimits,
        policy: str | None,
        cgroups: CgroupPlan,
    ) -> None:
        super().__init__(plan, limits, cgroups)
        self._server = ForkServer(worker_command(plan, limits, policy, template=True), limits.start_timeout)

    def start(self) -> WorkerHandle:
        cgroup = self._new_cgroup()
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, exit status
        worker_ends = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        try:
            forked = self._server.fork(worker_ends, self._start_timeout)
        except SandboxError:
            for read, write in pipes:
                os.close(read)
                os.close(write)
            if cgroup is not None:
                cgroup.remove()
            raise
        for fd in worker_ends:
            os.close(fd)
        worker = _ForkedWorker(forked, self._server, pipes, cgroup, self._reply_cap, self._reaper)
        try:
            info = await_ready(worker.connection, self._start_timeout)
            check_hardening(info, drops_root=self._plan.drops_root, seccomp=self._plan.seccomp)
            worker.adopt(worker_pid(forked.pid, info))
        except (SandboxError, OSError) as exc:
            stderr = worker.stderr()
            worker.kill()
            raise SandboxError(f"{exc}{stderr}") from exc
        return WorkerHandle(worker.connection, info, worker.kill, worker.exit_status)

    def close(self) -> None:
        self._reaper.close()
        self._server.close()


class _ForkedWorker:
    """A forked worker as the host holds it: its pipes, a pidfd of its process, its cgroup."""

    def __init__(
        self,
        forked: Forked,
        server: ForkServer,
        pipes: list[tuple[int, int]],
        cgroup: WorkerCgroup | None,
        cap: int,
        reaper: Reaper,
    ) -> None:
        self._reaper = reaper
        self._forked = forked
        self._server = server
        self._pidfd = os.pidfd_open(forked.pid)
        self._pid = forked.pid
        self._cgroup = cgroup
        self._stderr = pipes[2][0]
        self._status = pipes[3][0]
        self._exit_code: int | None = None
        self._killed = False
        self._scheduling: tuple[int, int] | None = None
        """The worker's scheduling policy and priority before its kill set it to idle."""
        self.connection = PausingConnection(
            os.fdopen(pipes[1][0], "rb", buffering=0),
            PipeWriter(os.fdopen(pipes[0][1], "wb", buffering=0)),
            cap,
        )

    def adopt(self, worker: int) -> None:
        """Check that the ready worker is the forked process, move it into the cgroup, pause it between
        calls."""
        if worker != self._pid:
            raise SandboxError(f"the forked worker {self._pid} is not the one that said ready ({worker})")
        if exited(self._pidfd):  # alive after the check: the pidfd, opened at the fork, is this worker's
            raise SandboxError(f"the forked worker {worker} exited while it started")
        if self._cgroup is not None:
            self._cgroup.join(worker)
        self.connection.pause_pid, self.connection.pause_pidfd = worker, self._pidfd

    def kill(self) -> None:
        """SIGKILL the worker now, at idle priority; the reaper finishes the rest (see ``launcher.Reaper``).

        Idle priority: woken by the SIGKILL, a worker that slept while stopped would otherwise preempt
        the host on its core to exit (tearing down its namespaces and memory) while the next episode
        starts (only its main thread's policy: threads that tool code left behind exit at their own)."""
        if self._killed:
            return
        self._killed = True
        self.connection.pause_pidfd = None  # the reaper closes it: nothing may signal through its number
        self._scheduling = self._server.schedule(self._forked, os.SCHED_IDLE, 0)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        self._reaper.put(self._finish)

    def _finish(self) -> None:
        # Killed in kill(): wait until it is gone, without polling. One that has not finished exiting at
        # idle priority once the next episode is under way finishes at its former one (a busy host could
        # otherwise hold back its exit, and its memory and cgroup, for seconds).
        if not ready(self._pidfd, _IDLE_EXIT_SECONDS):
            if self._scheduling is not None:
                self._server.schedule(self._forked, *self._scheduling)
            ready(self._pidfd, 2.0)
        os.close(self._pidfd)
        if self._cgroup is not None:
            self._cgroup.kill()  # anything else in the group (nothing, unless a process escaped the count)
            self._cgroup.remove()
        self.connection.close()
        os.close(self._stderr)
        os.close(self._status)

    def exit_status(self) -> int | None:
        """The worker's exit code as the template reported it (negative: the signal that killed it)."""
        if self._exit_code is None and not self._killed and ready(self._status, 0):
            text = os.read(self._status, 32).decode(errors="replace").strip()
            self._exit_code = int(text) if text.lstrip("-").isdigit() else None
        return self._exit_code

    def stderr(self) -> str:
        if not ready(self._stderr, 0.2):
            return ""
        text = os.read(self._stderr, 4096).decode(errors="replace").strip()
        return f"\nworker stderr:\n{text[-2000:]}" if text else ""
