"""The sandbox containers of this host: which process owns each, and removing them when it is gone.

Containers carry the owner's identity (boot, PID namespace, pid, start time) as a label; every new sandbox
removes those of owners that died without cleaning up (a SIGKILLed host process), and this process removes
its own at interpreter exit (:data:`REGISTRY`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import SandboxError
from hopgym.sandbox.docker.engine import sdk

SANDBOX_LABEL = "io.hopgym.sandbox"
OWNER_LABEL = "io.hopgym.owner"
"""``boot-id/pid-namespace/pid/start-ticks`` of the host process that owns the container."""
STALE_AFTER_SECONDS = 60.0
"""A stopped container this old is garbage whoever owns it (a live owner removes its own at once)."""


@dataclass(frozen=True)
class ProcessIdentity:
    """A host process, told apart from a later process that reuses its pid or lives in another namespace."""

    boot_id: str
    pid_namespace: str
    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of a running process, or None when it is gone (or cannot be inspected)."""
        try:
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
            boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return None
        start_ticks = _start_ticks(pid)
        return None if start_ticks is None else cls(boot_id, namespace, pid, start_ticks)

    @classmethod
    def parse(cls, label: str) -> ProcessIdentity | None:
        parts = label.split("/")
        if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), int(parts[3]))

    def label(self) -> str:
        return f"{self.boot_id}/{self.pid_namespace}/{self.pid}/{self.start_ticks}"


def this_process() -> ProcessIdentity:
    identity = ProcessIdentity.of(os.getpid())
    if identity is None:
        raise SandboxError("cannot read this process's identity from /proc (needed to label containers)")
    return identity


def owner_is_gone(label: str, me: ProcessIdentity) -> bool:
    """True when the owner named by ``label`` surely died: same boot and PID namespace as this process
    (anything else cannot be checked from here) and no process with that pid and start time exists."""
    owner = ProcessIdentity.parse(label)
    if owner is None or (owner.boot_id, owner.pid_namespace) != (me.boot_id, me.pid_namespace):
        return False
    return _start_ticks(owner.pid) != owner.start_ticks


def _start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot), from its world-readable stat; None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def reap_stale_containers(api: Any) -> list[str]:
    """Remove sandbox containers whose owner died, and stopped ones older than STALE_AFTER_SECONDS."""
    me = this_process()
    reaped = []
    for container in api.containers(all=True, filters={"label": SANDBOX_LABEL}):
        labels = container.get("Labels") or {}
        stopped_long_ago = (
            container.get("State") != "running"
            and time.time() - container.get("Created", 0) > STALE_AFTER_SECONDS
        )
        if owner_is_gone(labels.get(OWNER_LABEL, ""), me) or stopped_long_ago:
            remove_container(api, container["Id"])
            reaped.append(container["Id"])
    return reaped


def list_sandbox_containers(api: Any, owner: ProcessIdentity | None = None) -> list[dict[str, Any]]:
    """Every sandbox container the engine holds (running or not), or only those of ``owner``."""
    label = SANDBOX_LABEL if owner is None else f"{OWNER_LABEL}={owner.label()}"
    return api.containers(all=True, filters={"label": label})


def remove_container(api: Any, container_id: str) -> None:
    """Kill and remove; a container already gone (or being removed) is fine."""
    docker = sdk()
    try:
        api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            raise SandboxError(
                f"the Docker engine could not remove container {container_id[:12]}: {exc}"
            ) from exc
    REGISTRY.forget(container_id)


class _ContainerRegistry:
    """The containers this process created and has not removed yet. At interpreter exit it removes them
    all and refuses new ones (a pool's refill thread may still be starting a spare then)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Any] = {}
        self._closed = False

    def create(self, api: Any, image: str, **options: Any) -> str:
        with self._lock:
            if self._closed:
                raise SandboxError("the interpreter is exiting: no new sandbox container is started")
            container_id = api.create_container(image, **options)["Id"]
            self._live[container_id] = api
            return container_id

    def forget(self, container_id: str) -> None:
        with self._lock:
            self._live.pop(container_id, None)

    def remove_all(self) -> None:
        with self._lock:
            self._closed = True
            live = list(self._live.items())
        for container_id, api in live:
            with contextlib.suppress(Exception):  # at exit, one failure must not keep the others alive
                remove_container(api, container_id)


REGISTRY = _ContainerRegistry()
atexit.register(REGISTRY.remove_all)
