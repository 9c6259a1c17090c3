"""The ``process`` backend: pooled worker processes under bubblewrap or raw namespaces on this machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

from hopgym.errors import ConfigError, SandboxError
from hopgym.sandbox.isolation import (
    WORKER_ENVIRONMENT,
    IsolationPlan,
    WorkerLimits,
    resolve_isolation,
    worker_command,
)
from hopgym.sandbox.pool import Launcher, WorkerHandle, await_ready
from hopgym.sandbox.pooled import PooledSandbox
from hopgym.sandbox.protocol import WorkerConnection

POLICIES = (None, "restricted")
_BWRAP_SIGNAL_BASE = 128
"""bubblewrap exits with 128 + n when the sandboxed worker was killed by signal n."""


class ProcessLauncher(Launcher):
    """Starts ``worker.py`` as a child process (under bwrap unless the plan says otherwise)."""

    def __init__(
        self, plan: IsolationPlan, limits: WorkerLimits, policy: str | None, start_timeout: float = 30.0
    ) -> None:
        self._plan = plan
        self._command = worker_command(plan, limits, policy)
        self._start_timeout = start_timeout

    def start(self) -> WorkerHandle:
        process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=WORKER_ENVIRONMENT,
            start_new_session=True,
            close_fds=True,
        )
        connection = WorkerConnection(process.stdout, process.stdin)

        def kill() -> None:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            connection.close()
            process.stderr.close()

        try:
            info = await_ready(connection, self._start_timeout)
            self._check_hardening(info)
        except SandboxError as exc:
            kill_and_report = _stderr_after_kill(process, kill)
            raise SandboxError(f"{exc}{kill_and_report}") from exc
        return WorkerHandle(connection, info, kill, lambda: self._exit_code(process))

    def _check_hardening(self, info: dict) -> None:
        """Refuse a worker that reports weaker hardening than planned (never silently downgraded)."""
        if self._plan.drops_root and info.get("uid") == 0:
            raise SandboxError("the sandbox worker still runs as root after dropping privileges")
        if info.get("seccomp") != self._plan.seccomp:
            raise SandboxError(
                f"the sandbox worker reports seccomp={info.get('seccomp')}, planned {self._plan.seccomp}"
            )

    def _exit_code(self, process: subprocess.Popen) -> int | None:
        code = process.poll()
        if code is not None and self._plan.level == "bwrap" and code > _BWRAP_SIGNAL_BASE:
            return _BWRAP_SIGNAL_BASE - code
        return code


def _stderr_after_kill(process: subprocess.Popen, kill) -> str:
    process.kill()
    text = process.stderr.read().decode(errors="replace").strip()
    kill()
    return f"\nworker stderr:\n{text[-2000:]}" if text else ""


class ProcessSandbox(PooledSandbox):
    """Tool code in pooled worker processes; see :mod:`hopgym.sandbox.isolation` for the levels.

    ``isolation``: ``auto`` (bwrap, else raw namespaces), ``bwrap``, ``namespaces`` or ``none``;
    ``seccomp=False`` and ``isolation="none"`` are explicit requests for less. ``policy="restricted"`` adds
    RestrictedPython inside the worker. ``timeout`` is the default wall-clock limit per call in seconds.
    ``preload``: sources every worker runs before it is handed out (shared data; see ``PreloadingLauncher``).
    Not thread-safe: use one sandbox per concurrently running episode.
    """

    def __init__(
        self,
        isolation: str = "auto",
        seccomp: bool = True,
        policy: str | None = None,
        timeout: float = 5.0,
        spares: int = 1,
        memory_mb: int = 512,
        cpu_seconds: int = 60,
        file_mb: int = 16,
        open_files: int = 64,
        output_cap: int = 16_384,
        result_cap: int = 65_536,
        preload: Sequence[str] = (),
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"policy={policy!r} is not a policy; valid: None, 'restricted'")
        plan = resolve_isolation(isolation, seccomp)
        limits = WorkerLimits(
            memory_mb=memory_mb,
            cpu_seconds=cpu_seconds,
            file_mb=file_mb,
            open_files=open_files,
            output_cap=output_cap,
            result_cap=result_cap,
        )
        described = plan.describe() + ("+restricted" if policy else "")
        super().__init__(
            ProcessLauncher(plan, limits, policy), described, timeout=timeout, spares=spares, preload=preload
        )
