"""A fleet of hopgym env servers on a Ray cluster, for a trainer whose tool calls run on the cluster's CPUs.

Each server is a Ray actor, spread over the nodes (Ray's ``SPREAD``), serving ``hopgym serve env``'s app
(:func:`~hopgym.serving.openenv_server.env_app`, behind a key the fleet makes) on a uvicorn thread in
the actor's own process, so a node that dies takes its servers and their sandbox workers with it. The
fleet's URLs and key go to :func:`~hopgym.serving.remote_rollouts.on_servers`
(:meth:`EnvFleet.rollouts`), which leaves a dead server out and plays its episodes again on the others::

    with EnvFleet(4, "ToolHop-v0", address="auto") as fleet:
        train(config, make_rollouts=fleet.rollouts())
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from hopgym.errors import ClusterError, ConfigError, EnvServerError, one_line
from hopgym.serving.openenv_server import ServedEnv, env_app, uvicorn_server
from hopgym.serving.ray_cluster import join_cluster, require_ray
from hopgym.serving.remote_rollouts import on_servers
from hopgym.serving.rollouts import RolloutsFactory

ray = require_ray()
from ray.exceptions import RayError  # noqa: E402 - only once ray is there

STARTUP_TIMEOUT = 300.0
"""Seconds for a fleet's servers to start (an actor's imports, its env's data, the first sandbox)."""
STOP_TIMEOUT = 60.0


@ray.remote(max_restarts=0)
class EnvServerActor:
    """One env server: the env app on a uvicorn thread of this actor's process, on its node's address."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], max_sessions: int, api_key: str) -> None:
        self._served = ServedEnv(env_id, env_kwargs, max_sessions)
        self._served.check()
        host = ray.util.get_node_ip_address()
        self._listener = socket.create_server(
            (host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET
        )
        self._server = uvicorn_server(env_app(self._served, api_key))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._listener]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise EnvServerError(f"the env server on {host} did not start")
            time.sleep(0.05)
        port = self._listener.getsockname()[1]
        self._url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def where(self) -> tuple[str, int]:
        """The server's URL and this actor's process id (whose descendants are its sandbox workers)."""
        return self._url, os.getpid()

    def stop(self) -> None:
        """Stop serving, close every session's env and its sandbox workers."""
        self._server.should_exit = True
        self._thread.join(timeout=STOP_TIMEOUT)
        self._served.pool.close_all()
        self._listener.close()


class EnvFleet:
    """``count`` servers of ``env_id`` (made with ``env_kwargs``, ``max_sessions`` each, ``cpus`` of a node
    each) on the Ray cluster at ``address`` (None: ``RAY_ADDRESS``, else a new local instance), behind
    ``api_key``. Use it as a context manager, or call :meth:`close`: the servers stop, and their envs."""

    def __init__(
        self,
        count: int,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        max_sessions: int = 8,
        cpus: float = 1.0,
        address: str | None = None,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(count, int) or count < 1:
            raise ConfigError(f"a fleet needs at least one server, got {count!r}")
        join_cluster(address)
        self.api_key = api_key or secrets.token_urlsafe(32)
        """The servers' key (each listens on its node's address, reachable from the cluster): ``api_key``,
        else a new one."""
        spread = EnvServerActor.options(num_cpus=cpus, scheduling_strategy="SPREAD")  # type: ignore[attr-defined]
        self._actors = [
            spread.remote(env_id, dict(env_kwargs or {}), max_sessions, self.api_key) for _ in range(count)
        ]
        try:
            started = ray.get([actor.where.remote() for actor in self._actors], timeout=STARTUP_TIMEOUT)
        except (RayError, TimeoutError) as exc:
            self.close()
            raise ClusterError(f"the fleet's env servers did not start: {one_line(str(exc))}") from exc
        self.urls = [url for url, _ in started]
        self.pids = [pid for _, pid in started]
        """The servers' processes (on their nodes)."""

    def rollouts(self) -> RolloutsFactory:
        """Where episodes play on this fleet (``train(make_rollouts=...)``, ``EvalConfig.make_rollouts``)."""
        return on_servers(self.urls, self.api_key)

    def close(self) -> None:
        """Stop every server still alive (a dead node's are gone with it) and end its actor."""
        for actor in self._actors:
            with contextlib.suppress(RayError, TimeoutError):  # its node died, or it never started
                ray.get(actor.stop.remote(), timeout=STOP_TIMEOUT)
            ray.kill(actor)
        self._actors = []

    def __enter__(self) -> EnvFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
