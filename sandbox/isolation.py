"""Choosing the isolation a process worker gets, and building the command that launches it.

Levels: ``bwrap`` (bubblewrap: a minimal read-only view of the host's files, see :class:`WorkerView`;
private /tmp, minimal /dev, fresh /proc, new PID, network, IPC and UTS namespaces, no environment),
``namespaces`` (the same shape made by the worker itself with raw ``unshare``/``mount`` calls; needs root)
and ``none`` (no view: the worker sees the host's files). ``auto``: bwrap when installed, else namespaces.
Inside every level the worker applies rlimits and (unless ``seccomp=False``) a seccomp filter, and, when
started as root (at any level, ``none`` too), drops to an unprivileged uid for real.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import os
import py_compile
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError, IsolationUnavailableError
from hopgym.sandbox.hardening import DEVICES, LIBSECCOMP
from hopgym.sandbox.limits import SandboxLimits

ISOLATION_LEVELS = ("auto", "bwrap", "namespaces", "none")
UNPRIVILEGED_UID = 65534
"""``nobody``: the uid tool code runs as."""
WORKER_SCRIPT = Path(__file__).resolve().with_name("worker.py")
WORKER_FILES = (
    "worker.py",
    "hardening.py",
    "template.py",
    "code_policy.py",
    "policy.py",
    "wire.py",
    "handler.py",
)
"""Every file the worker runs, beside :data:`WORKER_SCRIPT`: the sandbox image copies these (Dockerfile),
the process backend's view shows their folder."""
WORKER_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The whole environment a worker sees: nothing of the host's (secrets live there)."""


WorkerLimits = SandboxLimits
"""The name launchers took their limits by before :class:`SandboxLimits` held every limit."""


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
        """Whether the worker drops to :data:`UNPRIVILEGED_UID`: always under bwrap or namespaces, and under
        ``none`` when started as root (tool code as root would read every file of the machine)."""
        return self.level != "none" or os.geteuid() == 0

    @property
    def isolates_files(self) -> bool:
        """Whether tool code sees only the worker's view; under ``none`` it reads whatever its uid can."""
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


def worker_command(
    plan: IsolationPlan,
    limits: SandboxLimits,
    policy: str | None,
    view: WorkerView | None = None,
    template: bool = False,
) -> list[str]:
    """The argv that starts one worker under ``plan``; its stdin/stdout carry the protocol. With
    ``template``, the fork-server instead (see ``template.serve_template``; root only): it keeps the
    capabilities to give each worker it forks its own namespaces and mounts, and its stdin is the host's
    control socket."""
    python_path = _policy_python_path() if policy else []
    view = view if view is not None else worker_view(policy)
    config = {
        **limits.worker_config(seccomp=plan.seccomp, policy=policy),
        "namespaces": plan.level == "namespaces",
        "view": {"binds": list(view.binds), "symlinks": [list(pair) for pair in view.symlinks]},
        "tmpfs_bytes": limits.tmpfs_mb << 20,
        "drop_uid": UNPRIVILEGED_UID if plan.drops_root else None,
        # Without a view the unprivileged uid may not read the interpreter's own files (a Python under
        # /root): what the worker imports late is imported before it drops.
        "preload": ["ast"] if plan.drops_root and plan.level == "none" else [],
        "host_pid": os.getpid(),
        "python_path": python_path,
        "template": template,
    }
    python = [interpreter(), "-I", "-S", "-B", worker_program(), json.dumps(config)]
    if plan.level != "bwrap":
        return python
    return [*_bwrap_arguments(view, limits, template), "--", *python]


def interpreter() -> str:
    """The real interpreter behind ``sys.executable``: a venv's ``python`` is a link to it, and the worker
    runs with ``-I -S`` (no site-packages), so the venv itself stays out of the worker's view."""
    return os.path.realpath(sys.executable)


@functools.cache
def worker_program() -> str:
    """What the worker's interpreter runs: ``worker.py`` compiled afresh into its ``__pycache__``, with the
    modules it imports (compiling the sources costs about 7 ms of every worker start, which runs with
    ``-B`` and writes no cache), or the source itself where that folder is read-only; both run the same
    code."""
    try:
        compiled = [_compiled(WORKER_SCRIPT.with_name(name)) for name in WORKER_FILES]
    except (OSError, py_compile.PyCompileError):
        return str(WORKER_SCRIPT)
    return compiled[WORKER_FILES.index(WORKER_SCRIPT.name)]


def _compiled(source: Path) -> str:
    compiled = importlib.util.cache_from_source(str(source))
    py_compile.compile(str(source), cfile=compiled, doraise=True)
    return compiled


def _bwrap_arguments(view: WorkerView, limits: SandboxLimits, template: bool = False) -> list[str]:
    args = ["bwrap"]  # no bind of "/": bubblewrap's root is an empty tmpfs holding only the view
    for path, target in view.symlinks:
        args += ["--symlink", target, path]
    args += _bwrap_binds([path for path in view.binds if not _under_tmp(path)])
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    # e.g. a checkout and its venv in /tmp: bound after the private /tmp that would cover them
    args += _bwrap_binds([path for path in view.binds if _under_tmp(path)])
    args += ["--remount-ro", "/"]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--chdir", "/tmp"]
    for name, value in WORKER_ENVIRONMENT.items():
        args += ["--setenv", name, value]
    if os.geteuid() == 0:
        # Without a user namespace the worker's uid is the real one: it starts as root with only the
        # capabilities needed to drop to nobody, and drops before running anything untrusted.
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        # The fork-server makes each worker's PID, mount and IPC namespaces; its workers drop to nobody,
        # which clears every capability, before anything untrusted runs.
        args += ["--cap-add", "CAP_SYS_ADMIN"] if template else []
    else:
        args += ["--unshare-user", "--uid", str(UNPRIVILEGED_UID), "--gid", str(UNPRIVILEGED_UID)]
    return args


def _bwrap_binds(paths: list[str]) -> list[str]:
    """Read-only binds, each folder on the way made traversable: bubblewrap would copy a 0700 home's mode
    onto the folders it creates, and the worker's unprivileged uid could not reach the interpreter."""
    args: list[str] = []
    made: set[Path] = set()
    for path in paths:
        for parent in reversed(Path(path).parents[:-1]):
            if parent not in made and str(parent) != "/tmp":
                made.add(parent)
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
    return args


def _restricted_python_package() -> str:
    spec = importlib.util.find_spec("RestrictedPython")
    if spec is None or not spec.submodule_search_locations:
        raise IsolationUnavailableError(
            "policy='restricted' needs RestrictedPython (pip install RestrictedPython)"
        )
    return os.path.realpath(spec.submodule_search_locations[0])


def _policy_python_path() -> list[str]:
    """The directory RestrictedPython is imported from (the worker runs without site-packages); only the
    package itself is in the worker's view, not the rest of that directory."""
    return [os.path.dirname(_restricted_python_package())]


@dataclass(frozen=True)
class WorkerView:
    """The whole filesystem a process worker sees, besides a private /tmp, a fresh /proc and a minimal
    /dev (null, zero, full, random, urandom): each of ``binds`` read-only at its own path, and the
    ``symlinks`` (path, target) of a merged-/usr system. Nothing else of the host exists in it: not the
    data, not home directories, caches or the host's /dev/shm."""

    binds: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]

    def report(self) -> dict[str, Any]:
        return {
            "read_only": list(self.binds),
            "symlinks": {path: target for path, target in self.symlinks},
            "private": ["/tmp (tmpfs)", "/proc (own PID namespace)", "/dev (" + ", ".join(DEVICES) + ")"],
        }


SYSTEM_DIRECTORIES = ("/usr", "/lib", "/lib64", "/lib32", "/libx32")
"""The C library, the dynamic loader and the shared libraries the interpreter and ctypes load."""
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
"""The loader's cache (libseccomp is found through it) and the local time zone."""
"""The device nodes of the worker's /dev (the namespaces mode binds them; bubblewrap makes the same)."""


def worker_view(policy: str | None = None) -> WorkerView:
    """What a process worker needs: the system libraries, the interpreter's prefix, the worker's folder
    and, for ``policy="restricted"``, the RestrictedPython package; refused if it would show the data."""
    wanted = [sys.base_prefix, os.path.dirname(interpreter()), str(WORKER_SCRIPT.parent)]
    wanted += [_restricted_python_package()] if policy else []
    symlinks, binds = [], []
    for path in SYSTEM_DIRECTORIES:
        if os.path.islink(path):
            symlinks.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append(path)
    binds += [path for path in SYSTEM_FILES if os.path.isfile(path)]
    binds += [os.path.realpath(path) for path in wanted]
    binds = sorted(set(binds))
    binds = [path for path in binds if not any(_inside(path, other) for other in binds if other != path)]
    _refuse_data(binds)
    return WorkerView(tuple(binds), tuple(symlinks))


def _refuse_data(binds: list[str]) -> None:
    data = os.environ.get("HOPGYM_DATA")
    if not data:
        return
    data = os.path.realpath(data)
    for path in binds:
        if path == data or _inside(data, path) or _inside(path, data):
            raise IsolationUnavailableError(
                f"the worker's view would include the data ($HOPGYM_DATA={data}) through {path}: "
                "keep the data outside the interpreter's prefix and the system directories"
            )


def _inside(path: str, folder: str) -> bool:
    return Path(folder) in Path(path).parents


def _under_tmp(path: str) -> bool:
    return _inside(path, "/tmp")
