"""Choosing the isolation a process worker gets, and building the command that launches it.

Levels: ``bwrap`` (bubblewrap: read-only root, private /tmp, minimal /dev, fresh /proc, new PID, network,
IPC and UTS namespaces, no environment), ``namespaces`` (the same shape made by the worker itself with raw
``unshare``/``mount`` calls; needs root) and ``none``. ``auto`` means bwrap when installed, else namespaces.
Inside every level the worker applies rlimits and (unless ``seccomp=False``) a seccomp filter, and, when
started as root under bwrap or namespaces, drops to an unprivileged uid for real.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import os
import py_compile
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError, IsolationUnavailableError

ISOLATION_LEVELS = ("auto", "bwrap", "namespaces", "none")
UNPRIVILEGED_UID = 65534
"""``nobody``: the uid tool code runs as."""
WORKER_SCRIPT = Path(__file__).resolve().with_name("worker.py")
LIBSECCOMP = "libseccomp.so.2"
"""Loaded by the worker through ctypes; must match ``worker.LIBSECCOMP``."""
WORKER_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The whole environment a worker sees: nothing of the host's (secrets live there)."""


@dataclass(frozen=True)
class WorkerLimits:
    """Resource limits applied inside each worker."""

    memory_mb: int = 512
    cpu_seconds: int = 60
    file_mb: int = 16
    open_files: int = 64
    tmpfs_mb: int = 64
    output_cap: int = 16_384
    """Characters of printed output kept per call."""
    result_cap: int = 65_536
    """Characters of a JSON-serialised result kept per call."""

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


@dataclass(frozen=True)
class IsolationPlan:
    """The isolation a worker will run under, decided before any worker starts."""

    level: str
    """``bwrap``, ``namespaces`` or ``none``."""
    seccomp: bool

    def describe(self) -> str:
        parts = [self.level] if self.level != "none" else []
        parts += ["seccomp"] if self.seccomp else []
        return "+".join([*parts, "rlimits"])

    @property
    def drops_root(self) -> bool:
        return self.level != "none"


def resolve_isolation(requested: str = "auto", seccomp: bool = True) -> IsolationPlan:
    """Turn a requested level into a plan, or say what is missing; never quietly weaker than asked."""
    if requested not in ISOLATION_LEVELS:
        raise ConfigError(f"isolation={requested!r} is not a level; valid: {', '.join(ISOLATION_LEVELS)}")
    if seccomp:
        _require_seccomp()
    if requested == "auto":
        level = "bwrap" if shutil.which("bwrap") else "namespaces"
        if level == "namespaces" and os.geteuid() != 0:
            raise IsolationUnavailableError(
                "no process isolation is available: bubblewrap is not installed (apt-get install bubblewrap) "
                "and raw namespaces need root; pass isolation='none' to run without namespaces explicitly"
            )
        return IsolationPlan(level, seccomp)
    if requested == "bwrap" and not shutil.which("bwrap"):
        raise IsolationUnavailableError(
            "isolation='bwrap' needs bubblewrap on PATH (apt-get install bubblewrap); "
            "or pass isolation='namespaces' (root only) or isolation='none'"
        )
    if requested == "namespaces" and os.geteuid() != 0:
        raise IsolationUnavailableError(
            "isolation='namespaces' needs root to create namespaces and drop to an unprivileged uid; "
            "install bubblewrap (apt-get install bubblewrap) or pass isolation='none'"
        )
    return IsolationPlan(requested, seccomp)


def _require_seccomp() -> None:
    try:
        ctypes.CDLL(LIBSECCOMP)
    except OSError as exc:
        raise IsolationUnavailableError(
            f"seccomp needs the libseccomp library ({exc}; apt-get install libseccomp2); "
            "or pass seccomp=False"
        ) from exc


def worker_command(plan: IsolationPlan, limits: WorkerLimits, policy: str | None) -> list[str]:
    """The argv that starts one worker under ``plan``; its stdin/stdout carry the protocol."""
    python_path = _policy_python_path() if policy else []
    reachable = reachable_paths(python_path)
    config = {
        **limits.worker_config(seccomp=plan.seccomp, policy=policy),
        "namespaces": plan.level == "namespaces",
        "hidden_mounts": hidden_ancestors(reachable),
        "tmp_mounts": under_private_tmp(reachable),
        "tmpfs_bytes": limits.tmpfs_mb << 20,
        "drop_uid": UNPRIVILEGED_UID if plan.drops_root else None,
        "python_path": python_path,
    }
    python = [sys.executable, "-I", "-S", "-B", worker_program(), json.dumps(config)]
    if plan.level != "bwrap":
        return python
    return [*_bwrap_arguments(reachable, limits), "--", *python]


@functools.cache
def worker_program() -> str:
    """What the worker's interpreter runs: ``worker.py`` compiled afresh into its ``__pycache__`` (compiling
    the source costs about 7 ms of every worker start), or the source itself where that folder is read-only;
    both run the same code."""
    compiled = importlib.util.cache_from_source(str(WORKER_SCRIPT))
    try:
        return py_compile.compile(str(WORKER_SCRIPT), cfile=compiled, doraise=True)
    except (OSError, py_compile.PyCompileError):
        return str(WORKER_SCRIPT)


def _bwrap_arguments(reachable: list[str], limits: WorkerLimits) -> list[str]:
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    for path in under_private_tmp(reachable):  # e.g. a checkout and its venv in /tmp: shown read-only
        args += ["--ro-bind", path, path]
    for hidden, paths in hidden_ancestors(reachable).items():
        args += ["--perms", "0755", "--size", str(1 << 20), "--tmpfs", hidden]
        for path in paths:
            for parent in reversed(Path(path).parents):
                if parent != Path(hidden) and Path(hidden) in parent.parents:
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", path, path]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--chdir", "/tmp"]
    for name, value in WORKER_ENVIRONMENT.items():
        args += ["--setenv", name, value]
    if os.geteuid() == 0:
        # Without a user namespace the worker's uid is the real one: it starts as root with only the
        # capabilities needed to drop to nobody, and drops before running anything untrusted.
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(UNPRIVILEGED_UID), "--gid", str(UNPRIVILEGED_UID)]
    return args


def _policy_python_path() -> list[str]:
    """The directory RestrictedPython is installed in (the worker runs without site-packages)."""
    spec = importlib.util.find_spec("RestrictedPython")
    if spec is None or not spec.origin:
        raise IsolationUnavailableError(
            "policy='restricted' needs RestrictedPython (pip install RestrictedPython)"
        )
    return [os.path.dirname(os.path.dirname(spec.origin))]


def reachable_paths(extra: list[str] = ()) -> list[str]:
    """Directories the worker must read after dropping root: the interpreter, its libraries, the worker."""
    candidates = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    candidates.update([str(WORKER_SCRIPT.parent), *extra])
    resolved = sorted({os.path.realpath(path) for path in candidates})
    return [path for path in resolved if not any(path.startswith(other + "/") for other in resolved)]


def under_private_tmp(paths: list[str]) -> list[str]:
    """The paths the worker's private /tmp would cover up, so they must be mounted into it."""
    return [path for path in paths if Path("/tmp") in Path(path).parents]


def hidden_ancestors(paths: list[str]) -> dict[str, list[str]]:
    """Group paths by their topmost ancestor that other users cannot traverse (e.g. a 0700 /root)."""
    hidden: dict[str, list[str]] = {}
    for path in paths:
        for ancestor in reversed(Path(path).parents[:-1]):
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                hidden.setdefault(str(ancestor), []).append(path)
                break
    return hidden
