"""Per-worker cgroups on the host: a task (PID) limit and a memory limit that count everything a worker
creates (threads made by raw ``clone`` and memory held in a ``memfd`` included, which rlimits miss).

``cgroup="auto"`` uses cgroup v2 where this process may create child groups with the pids and memory
controllers, else cgroup v1 (pids and memory hierarchies, as on hosts that still mount them), else it
raises: a weaker setting (``cgroup="none"``: rlimits only) must be asked for explicitly. Each worker gets
its own group below this process's own group, so limits set on the host's group still apply above it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError, IsolationUnavailableError
from hopgym.sandbox import kernelfiles

CGROUP_MODES = ("auto", "v2", "v1", "none")
CONTROLLERS = ("pids", "memory")
_names = itertools.count()
WORKER_GROUP = re.compile(r"hopgym-(\d+)-(\d+)-(\d+)")
"""A worker's group: ``hopgym-<host's PID namespace>-<host pid>-<serial>``. A PID names a live host only
in its own namespace: a host in another one (the contained attack suite's) must not take a live host's
group for a dead one's and remove it between its creation and the worker's join."""


@dataclass(frozen=True)
class CgroupPlan:
    """Where each worker's group is created (one parent per v1 hierarchy, one for v2) and its limits."""

    version: str
    """``v2``, ``v1`` or ``none``."""
    parents: tuple[Path, ...] = ()
    max_tasks: int = 0
    memory_bytes: int = 0

    def describe(self) -> str:
        return "" if self.version == "none" else f"cgroup{self.version[1:]}"

    def report(self) -> dict[str, Any]:
        if self.version == "none":
            return {"version": "none"}
        return {"version": self.version, "max_tasks": self.max_tasks, "memory_bytes": self.memory_bytes}

    def create(self) -> WorkerCgroup | None:
        return None if self.version == "none" else WorkerCgroup(self)


def resolve_cgroups(requested: str, max_tasks: int, memory_bytes: int) -> CgroupPlan:
    """The cgroup plan for ``requested``, or an error naming what is missing; never weaker than asked."""
    if requested not in CGROUP_MODES:
        raise ConfigError(f"cgroup={requested!r} is not a mode; valid: {', '.join(CGROUP_MODES)}")
    if requested == "none":
        return CgroupPlan("none")
    reasons = []
    for version, find in (("v2", _v2_parents), ("v1", _v1_parents)):
        if requested not in ("auto", version):
            continue
        try:
            parents = find()
        except OSError as exc:
            reasons.append(f"cgroup {version}: {exc}")
            continue
        _remove_stale_groups(parents)
        return CgroupPlan(version, parents, max_tasks, memory_bytes)
    raise IsolationUnavailableError(
        f"cgroup={requested!r} is not available here ({'; '.join(reasons)}); run as root or in a cgroup "
        "delegated to this user, or pass cgroup='none' to limit workers by rlimits only"
    )


def _remove_stale_groups(parents: tuple[Path, ...]) -> None:
    """Remove the empty groups of hosts that died without removing them (their workers died with them)."""
    for parent in parents:
        for group in parent.glob("hopgym-*-*"):
            match = WORKER_GROUP.fullmatch(group.name)  # other hopgym groups (the attack suite's) stay
            if match is None:
                continue
            namespace, host = int(match[1]), int(match[2])
            if namespace == _PID_NAMESPACE and host != os.getpid() and not _alive(host):
                with contextlib.suppress(OSError):  # not yet empty: the next start tries again
                    group.rmdir()


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


_PID_NAMESPACE = _pid_namespace()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _mount_points(fstype: str) -> list[tuple[Path, set[str]]]:
    """(mount point, super options) of each mounted file system of ``fstype``."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, after = line.split(" - ", 1)
        kind, _source, options = after.split()[:3]
        if kind == fstype:
            found.append((Path(before.split()[4]), set(options.split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """This process's group path per v1 controller, and under ``""`` its v2 group."""
    groups = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            groups[controller] = path
    return groups


def _v2_parents() -> tuple[Path, ...]:
    mounts = _mount_points("cgroup2")
    if not mounts:
        raise OSError("no cgroup2 file system is mounted")
    parent = mounts[0][0] / _own_groups().get("", "/").lstrip("/")
    available = (parent / "cgroup.controllers").read_text().split()
    missing = [name for name in CONTROLLERS if name not in available]
    if missing:
        raise OSError(f"the controllers {missing} are not available in {parent}")
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    if any(name not in enabled for name in CONTROLLERS):
        # Fails (EBUSY) where this process shares its group: that group must be delegated for workers.
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{name}" for name in CONTROLLERS))
    _require_writable(parent)
    return (parent,)


def _v1_parents() -> tuple[Path, ...]:
    own = _own_groups()
    parents = []
    for controller in CONTROLLERS:
        mounts = [point for point, options in _mount_points("cgroup") if controller in options]
        if not mounts or controller not in own:
            raise OSError(f"no cgroup v1 {controller} hierarchy is mounted")
        parents.append(mounts[0] / own[controller].lstrip("/"))
        _require_writable(parents[-1])
    return tuple(parents)


def _require_writable(folder: Path) -> None:
    if not os.access(folder, os.W_OK):
        raise OSError(f"{folder} is not writable by this user")


class WorkerCgroup:
    """One worker's group(s): created with their limits before the worker starts, joined by the worker's
    first process (see :meth:`join_command`), emptied and removed when the worker is killed."""

    def __init__(self, plan: CgroupPlan) -> None:
        self.plan = plan
        name = f"hopgym-{_PID_NAMESPACE}-{os.getpid()}-{next(_names)}"
        self.groups = [parent / name for parent in plan.parents]
        self._folders = [str(group) for group in self.groups]
        try:
            for folder in self._folders:
                os.mkdir(folder)
            self._write_limits()
        except OSError:
            self.remove()
            raise

    def _write_limits(self) -> None:
        tasks, memory = str(self.plan.max_tasks), str(self.plan.memory_bytes)
        if self.plan.version == "v2":
            (group,) = self._folders
            settings = [("pids.max", tasks), ("memory.max", memory), ("memory.swap.max", "0")]
            for key, value in settings:
                if key != "memory.swap.max" or os.path.exists(f"{group}/{key}"):
                    kernelfiles.write(f"{group}/{key}", value)
            return
        pids, memory_group = self._folders
        kernelfiles.write(f"{pids}/pids.max", tasks)
        kernelfiles.write(f"{memory_group}/memory.limit_in_bytes", memory)
        swap = f"{memory_group}/memory.memsw.limit_in_bytes"
        if os.path.exists(swap):  # swap accounting on: no swap either
            kernelfiles.write(swap, memory)

    def join_command(self, command: list[str]) -> list[str]:
        """``command`` run by a shell that first moves itself into the group(s), then ``exec``s it, so that
        the worker and everything it starts are counted from their first instruction."""
        joins = "".join(f"echo $$ > {shlex.quote(str(group / 'cgroup.procs'))} && " for group in self.groups)
        return ["/bin/sh", "-c", joins + 'exec "$@"', "sh", *command]

    def join(self, pid: int) -> None:
        """Move the process ``pid`` (all its threads) into the group(s); what it starts later is counted."""
        for folder in self._folders:
            kernelfiles.write(f"{folder}/cgroup.procs", str(pid))

    def kill(self, patience: float = 2.0) -> None:
        """SIGKILL every process in the group(s) until none is left (the caller reaps its own child)."""
        give_up = time.monotonic() + patience
        while (pids := self._pids()) and time.monotonic() < give_up:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    def _pids(self) -> set[int]:
        pids: set[int] = set()
        for folder in self._folders:
            with contextlib.suppress(FileNotFoundError):
                pids.update(int(pid) for pid in kernelfiles.read(f"{folder}/cgroup.procs").split())
        return pids

    def remove(self, patience: float = 2.0) -> None:
        """Remove the group(s); an exited process may take a moment to leave its group."""
        give_up = time.monotonic() + patience
        for folder in self._folders:
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > give_up:
                        raise
                    time.sleep(0.001)
