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

import atexit
import contextlib
import json
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError, DockerUnavailableError, SandboxError, SandboxImageMissingError
from hopgym.sandbox.limits import (
    DEFAULT_MAX_TOOL_CALLS,
    DEFAULT_TIMEOUT,
    SandboxLimits,
    cgroup_memory_bytes,
    check_policy,
)
from hopgym.sandbox.pool import Launcher, WorkerHandle, await_ready, check_hardening
from hopgym.sandbox.pooled import PooledSandbox
from hopgym.sandbox.protocol import WorkerConnection, reply_cap

DEFAULT_IMAGE = "hopgym-sandbox:latest"
CONTAINER_USER = "10001:10001"
"""The uid:gid tool code runs as (the image's ``hopgym`` user); set explicitly so no image runs it as root."""
SANDBOX_LABEL = "io.hopgym.sandbox"
OWNER_LABEL = "io.hopgym.owner"
"""``boot-id/pid-namespace/pid/start-ticks`` of the host process that owns the container."""
STALE_AFTER_SECONDS = 60.0
"""A stopped container this old is garbage whoever owns it (a live owner removes its own at once)."""
_INIT_SIGNAL_BASE = 128
"""The container's init (tini) exits with 128 + n when the worker was killed by signal n."""
_STDERR_CAP = 8192


def _docker():
    """The docker SDK, imported only when the backend is used (it is the optional ``docker`` extra)."""
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailableError(
            "the docker sandbox backend needs the docker package: pip install 'hopgym[docker]'"
        ) from exc
    return docker


# ------------------------------------------------------------------------------------------------- engine


def _engine_errors() -> tuple[type[Exception], ...]:
    """What a failing engine or its connection raises through the SDK."""
    import requests

    return (_docker().errors.DockerException, requests.RequestException, OSError)


def connect_engine() -> Any:
    """A low-level client of the engine that ``DOCKER_HOST`` (default: the local socket) names."""
    docker = _docker()
    try:
        api = docker.from_env(version="auto", timeout=60).api
        api.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailableError(
            f"cannot reach the Docker engine at {where} ({exc}); start it (e.g. `systemctl start docker` "
            "or `dockerd`) or point DOCKER_HOST at one"
        ) from exc
    return api


def require_image(api: Any, image: str) -> None:
    """Fail with the build command when the engine does not hold ``image``."""
    docker = _docker()
    try:
        api.inspect_image(image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxImageMissingError(
            f"the sandbox image {image!r} is not in the Docker engine; build it with "
            f"`hopgym sandbox build --tag {image}` (from a hopgym source checkout) or "
            f"`docker build -t {image} .` in the repository root"
        ) from exc


def require_runtime(api: Any, runtime: str | None) -> None:
    """Fail clearly when a container runtime such as gVisor's ``runsc`` is asked for but not registered."""
    if runtime is None:
        return
    available = sorted(api.info().get("Runtimes", {}))
    if runtime not in available:
        hint = (
            ' (gVisor: install runsc, e.g. `apt-get install runsc`, register it under "runtimes" in '
            "/etc/docker/daemon.json and reload dockerd; .ci/docker-setup.sh shows how)"
            if runtime == "runsc"
            else ""
        )
        raise DockerUnavailableError(
            f"the Docker engine has no runtime {runtime!r}{hint}; its runtimes: {', '.join(available)}"
        )


# ------------------------------------------------------------------------------------------------- owners


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


def _this_process() -> ProcessIdentity:
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
    me = _this_process()
    reaped = []
    for container in api.containers(all=True, filters={"label": SANDBOX_LABEL}):
        labels = container.get("Labels") or {}
        stopped_long_ago = (
            container.get("State") != "running"
            and time.time() - container.get("Created", 0) > STALE_AFTER_SECONDS
        )
        if owner_is_gone(labels.get(OWNER_LABEL, ""), me) or stopped_long_ago:
            _remove_container(api, container["Id"])
            reaped.append(container["Id"])
    return reaped


def list_sandbox_containers(api: Any, owner: ProcessIdentity | None = None) -> list[dict[str, Any]]:
    """Every sandbox container the engine holds (running or not), or only those of ``owner``."""
    label = SANDBOX_LABEL if owner is None else f"{OWNER_LABEL}={owner.label()}"
    return api.containers(all=True, filters={"label": label})


def _remove_container(api: Any, container_id: str) -> None:
    """Kill and remove; a container already gone (or being removed) is fine."""
    docker = _docker()
    try:
        api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            raise SandboxError(
                f"the Docker engine could not remove container {container_id[:12]}: {exc}"
            ) from exc
    _REGISTRY.forget(container_id)


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
                _remove_container(api, container_id)


_REGISTRY = _ContainerRegistry()
atexit.register(_REGISTRY.remove_all)


# ---------------------------------------------------------------------------------------------- streams


class _AttachRelay:
    """Splits the attach stream's frames: stdout goes to a pipe that a WorkerConnection reads,
    stderr into a small buffer kept for error messages. Ends (closing the pipe) when the stream ends."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._frames = sock.makefile("rb")
        read_fd, self._write_fd = os.pipe()
        self.reader = os.fdopen(read_fd, "rb", buffering=0)
        self.stderr = bytearray()
        self.ended = threading.Event()
        threading.Thread(target=self._run, name="hopgym-docker-attach", daemon=True).start()

    def _run(self) -> None:
        try:
            while len(header := self._frames.read(8)) == 8:
                stream, size = header[0], int.from_bytes(header[4:8], "big")
                payload = self._frames.read(size)
                if stream == 1:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(self._write_fd, view) :]
                else:
                    self.stderr += payload[: max(0, _STDERR_CAP - len(self.stderr))]
                if len(payload) < size:
                    break
        except (OSError, ValueError):
            pass  # the host closed the pipe or the socket: the worker is being dropped
        finally:
            os.close(self._write_fd)
            self.ended.set()

    def close(self) -> None:
        """Wake and end the relay thread, and close the connection to the engine."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._frames.close()
        self._sock.close()

    def stderr_text(self) -> str:
        text = self.stderr.decode(errors="replace").strip()
        return f"\nworker stderr:\n{text[-2000:]}" if text else ""


class _SocketWriter:
    """The write side of the attach socket, written without blocking (the socket itself stays blocking
    for the relay thread that reads it); closing it closes the worker's stdin (end of input)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def write_some(self, data: bytes | memoryview) -> int:
        try:
            return self._sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)


# ----------------------------------------------------------------------------------------------- launcher


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
        self._labels = {SANDBOX_LABEL: "1", OWNER_LABEL: _this_process().label()}
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
            container_id = _REGISTRY.create(
                self._api,
                self._image,
                command=self._command,
                user=CONTAINER_USER,
                stdin_open=True,  # not detached, so also StdinOnce: stdin closes when the host's attach drops
                labels=self._labels,
                host_config=self._host_config,
                name=f"hopgym-sandbox-{uuid.uuid4().hex[:12]}",
            )
        except _engine_errors() as exc:
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
            relay = _AttachRelay(sock)
            self._api.start(container_id)
        except _engine_errors() as exc:
            if relay is not None:
                relay.close()
                relay.reader.close()
            _remove_container(self._api, container_id)
            raise SandboxError(f"the Docker engine could not start a sandbox container: {exc}") from exc
        connection = WorkerConnection(relay.reader, _SocketWriter(sock), self._reply_cap)
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
        self, container_id: str, connection: WorkerConnection, relay: _AttachRelay
    ) -> Callable[[], None]:
        dropped = threading.Event()

        def kill() -> None:
            if dropped.is_set():
                return
            dropped.set()
            connection.close()
            relay.close()
            try:
                future = self._removals.submit(_remove_container, self._api, container_id)
            except RuntimeError:  # the launcher is closed (interpreter exit): remove right here
                _remove_container(self._api, container_id)
                return
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)

        return kill

    def _exit_status(self, container_id: str, relay: _AttachRelay) -> Callable[[], int | None]:
        known: list[int] = []

        def exit_status() -> int | None:
            if known or not relay.ended.is_set():
                return known[0] if known else None
            try:
                state = self._api.inspect_container(container_id)["State"]
            except _engine_errors():  # gone already, or the engine failed: the exit code is unknown
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
    started and ready (one episode uses one); ``timeout``: the wall-clock limit of a ``load`` and the
    default one of a call (``load_timeout``, ``call_timeout``: one of them apart).
    ``memory_mb``, ``cpu_seconds``, ``file_mb``, ``open_files``: the worker's rlimits (``memory_mb`` also
    sizes the container's memory cgroup); ``cpus``, ``pids``, ``tmpfs_mb``: the container's limits.
    ``policy="restricted"`` adds RestrictedPython inside the worker. ``max_tool_calls``: tool calls one
    :meth:`execute` may make (see ``PooledSandbox``). Not thread-safe: one per episode runner.
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        runtime: str | None = None,
        policy: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        spares: int = 1,
        memory_mb: int = 1024,
        cpu_seconds: int = 60,
        file_mb: int = 16,
        open_files: int = 64,
        cpus: float = 1.0,
        pids: int = 64,
        tmpfs_mb: int = 64,
        output_cap: int = 16_384,
        result_cap: int = 65_536,
        start_timeout: float = 30.0,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        load_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> None:
        check_policy(policy)
        limits = SandboxLimits.of(
            timeout,
            load_timeout,
            call_timeout,
            start_timeout=start_timeout,
            memory_mb=memory_mb,
            cpu_seconds=cpu_seconds,
            file_mb=file_mb,
            open_files=open_files,
            tmpfs_mb=tmpfs_mb,
            output_cap=output_cap,
            result_cap=result_cap,
            max_tasks=pids,
            cpus=cpus,
            max_tool_calls=max_tool_calls,
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


# -------------------------------------------------------------------------------------------------- build


def default_build_context() -> Path:
    """The source checkout holding the Dockerfile (an editable install or a run from the repository)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "Dockerfile").is_file():
        raise ConfigError(
            f"no Dockerfile next to the installed package ({root}); run from a hopgym source checkout "
            "or pass the checkout's path as the build context"
        )
    return root


def build_image(
    context: Path,
    tag: str = DEFAULT_IMAGE,
    base: str | None = None,
    target: str = "sandbox",
    network: str | None = None,
) -> Iterator[str]:
    """Build a stage of the Dockerfile in ``context``; yields the build's output lines as they come."""
    docker = _docker()
    api = connect_engine()
    try:
        for chunk in api.build(
            path=str(context),
            tag=tag,
            target=target,
            buildargs={"BASE": base} if base else None,
            network_mode=network,
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise SandboxError(f"building {tag!r} failed: {chunk['error'].strip()}")
            if chunk.get("stream"):
                yield chunk["stream"].rstrip("\n")
    except docker.errors.APIError as exc:
        raise SandboxError(f"building {tag!r} failed: {exc}") from exc
