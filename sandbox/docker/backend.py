"""The ``docker`` backend: the sandbox worker in pooled, locked-down containers of the hopgym sandbox image.

Each worker is one long-lived container of the image the Dockerfile builds (``hopgym sandbox build``):
no network, a read-only root with a small tmpfs at /tmp, every capability dropped, no new privileges,
memory, CPU and pids limits, a non-root user, optionally the gVisor runtime ``runsc``. Inside it the same
``worker.py`` as the process backend applies its rlimits and seccomp filter. The host speaks the protocol
over the container's attached stdin/stdout: one attach per container, never a ``docker run`` per call.

Nothing outlives its owner: containers are removed when their worker is dropped, on ``close()`` and at
interpreter exit; a container whose host connection drops sees its stdin close and exits; and every new
sandbox removes the containers of owners that died without cleaning up (a SIGKILLed host process).
"""

from __future__ import annotations

import json
import signal
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from hopgym.errors import SandboxError
from hopgym.sandbox.docker.attach import AttachRelay, SocketWriter
from hopgym.sandbox.docker.containers import (
    OWNER_LABEL,
    REGISTRY,
    SANDBOX_LABEL,
    reap_stale_containers,
    remove_container,
    this_process,
)
from hopgym.sandbox.docker.engine import (
    DEFAULT_IMAGE,
    connect_engine,
    engine_errors,
    require_image,
    require_runtime,
)
from hopgym.sandbox.limits import LimitOptions, SandboxLimits, cgroup_memory_bytes, check_policy
from hopgym.sandbox.pool import Launcher, WorkerHandle, await_ready, check_hardening
from hopgym.sandbox.pooled import PooledSandbox
from hopgym.sandbox.protocol import WorkerConnection, reply_cap

if TYPE_CHECKING:
    from typing_extensions import Unpack

DEFAULT_MEMORY_MB = 1024
"""The worker's memory rlimit in a container unless ``memory_mb`` says otherwise (the process backend's is
:class:`SandboxLimits`' default)."""
CONTAINER_USER = "10001:10001"
"""The uid:gid tool code runs as (the image's ``hopgym`` user); set explicitly so no image runs it as root."""
_INIT_SIGNAL_BASE = 128
"""The container's init (tini) exits with 128 + n when the worker was killed by signal n."""


class DockerLauncher(Launcher):
    """Starts one worker container, attached over stdin/stdout, and waits for its ready message."""

    def __init__(
        self,
        api: Any,
        image: str,
        limits: SandboxLimits,
        policy: str | None = None,
        runtime: str | None = None,
    ) -> None:
        self._api = api
        self._reply_cap = reply_cap(limits.result_cap, limits.output_cap)
        self._image = image
        # The container itself provides the namespaces; the worker adds rlimits, seccomp and the policy.
        self._command = [json.dumps(limits.worker_config(seccomp=True, policy=policy))]
        self._labels = {SANDBOX_LABEL: "1", OWNER_LABEL: this_process().label()}
        self._host_config = api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,noexec,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            # The worker's address-space rlimit stops it first; this also bounds tmpfs files and init.
            mem_limit=cgroup_memory_bytes(limits),
            memswap_limit=cgroup_memory_bytes(limits),
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.max_tasks,
            init=True,
            runtime=runtime,
            log_config={"type": "none"},  # the protocol must not be copied to the engine's logs
        )
        self._start_timeout = limits.start_timeout
        self._removals = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopgym-docker-remove")
        self._pending: set[Future] = set()

    def start(self) -> WorkerHandle:
        try:
            container_id = REGISTRY.create(
                self._api,
                self._image,
                command=self._command,
                user=CONTAINER_USER,
                stdin_open=True,  # not detached, so also StdinOnce: stdin closes when the host's attach drops
                labels=self._labels,
                host_config=self._host_config,
                name=f"hopgym-sandbox-{uuid.uuid4().hex[:12]}",
            )
        except engine_errors() as exc:
            raise SandboxError(f"the Docker engine could not create a sandbox container: {exc}") from exc
        relay = None
        try:
            attached = self._api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            sock = getattr(attached, "_sock", attached)
            sock.settimeout(
                None
            )  # calls have their own deadlines; the client's timeout must not end the relay
            relay = AttachRelay(sock)
            self._api.start(container_id)
        except engine_errors() as exc:
            if relay is not None:
                relay.close()
                relay.reader.close()
            remove_container(self._api, container_id)
            raise SandboxError(f"the Docker engine could not start a sandbox container: {exc}") from exc
        connection = WorkerConnection(relay.reader, SocketWriter(sock), self._reply_cap)
        handle = WorkerHandle(
            connection,
            {},
            self._dropper(container_id, connection, relay),
            self._exit_status(container_id, relay),
        )
        try:
            handle.info = {**await_ready(connection, self._start_timeout), "container": container_id}
            check_hardening(handle.info, drops_root=True, seccomp=True)
        except SandboxError as exc:
            handle.kill()
            raise SandboxError(f"{exc}{relay.stderr_text()}") from exc
        return handle

    def close(self) -> None:
        """Wait until every dropped container is removed."""
        wait(self._pending.copy())
        self._removals.shutdown(wait=True)

    def _dropper(
        self, container_id: str, connection: WorkerConnection, relay: AttachRelay
    ) -> Callable[[], None]:
        dropped = threading.Event()

        def kill() -> None:
            if dropped.is_set():
                return
            dropped.set()
            connection.close()
            relay.close()
            try:
                future = self._removals.submit(remove_container, self._api, container_id)
            except RuntimeError:  # the launcher is closed (interpreter exit): remove right here
                remove_container(self._api, container_id)
                return
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)

        return kill

    def _exit_status(self, container_id: str, relay: AttachRelay) -> Callable[[], int | None]:
        known: list[int] = []

        def exit_status() -> int | None:
            if known or not relay.ended.is_set():
                return known[0] if known else None
            try:
                state = self._api.inspect_container(container_id)["State"]
            except engine_errors():  # gone already, or the engine failed: the exit code is unknown
                return None
            if state.get("Running"):
                return None
            code = state.get("ExitCode", 0)
            if state.get("OOMKilled"):
                code = -signal.SIGKILL
            elif code > _INIT_SIGNAL_BASE:
                code = _INIT_SIGNAL_BASE - code
            known.append(code)
            return code

        return exit_status


# ------------------------------------------------------------------------------------------------ sandbox


class DockerSandbox(PooledSandbox):
    """Tool code in pooled worker containers of the hopgym sandbox image.

    ``image``: the image tag (see ``hopgym sandbox build``); ``runtime``: a container runtime registered
    with the engine, e.g. ``"runsc"`` for gVisor (an error when absent); ``spares``: containers kept
    started and ready (one episode uses one); ``cpus``, ``pids``, ``tmpfs_mb``: the container's limits;
    ``options``: the limits of :class:`LimitOptions` (``timeout``, ``memory_mb`` ...; defaults:
    :class:`SandboxLimits`', but ``memory_mb``: :data:`DEFAULT_MEMORY_MB`, which also sizes the container's
    memory cgroup). ``policy="restricted"`` adds RestrictedPython inside the worker. Not thread-safe: one
    per episode runner.
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        runtime: str | None = None,
        policy: str | None = None,
        spares: int = 1,
        cpus: float = 1.0,
        pids: int = 64,
        tmpfs_mb: int = 64,
        start_timeout: float = 30.0,
        **options: Unpack[LimitOptions],
    ) -> None:
        check_policy(policy)
        options.setdefault("memory_mb", DEFAULT_MEMORY_MB)
        limits = SandboxLimits.of(
            cpus=cpus, max_tasks=pids, tmpfs_mb=tmpfs_mb, start_timeout=start_timeout, **options
        )
        api = connect_engine()
        require_image(api, image)
        require_runtime(api, runtime)
        reap_stale_containers(api)
        self._launcher = DockerLauncher(api, image, limits, policy, runtime)
        described = (
            f"docker{f'[{runtime}]' if runtime else ''}+seccomp+rlimits{'+restricted' if policy else ''}"
        )
        try:
            super().__init__(self._launcher, described, spares=spares, limits=limits)
        except BaseException:
            self._launcher.close()
            raise

    def close(self) -> None:
        super().close()
        self._launcher.close()
