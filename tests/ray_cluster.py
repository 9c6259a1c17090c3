"""A real Ray cluster of up to two nodes on this machine (loopback only), for the ray executor's tests and
benchmark: each node is a ``ray start --block`` in its own process group, with one CPU and a custom
resource naming it, so where an episode ran can be told from its record."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

RAY = Path(sys.executable).with_name("ray")
NODE_RESOURCES = ("hopgym_head", "hopgym_second")
FAST_NODE_DEATH = {  # the head declares a silent node dead after about 3 s instead of about 30 s
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
WITHOUT_TOKEN_AUTH = {"RAY_AUTH_MODE": "disabled"}
"""The nodes and the driver, whatever the user's Ray set-up: when ``RAY_AUTH_MODE`` is unset, a
``~/.ray/auth_token`` (left by any earlier Ray session of the user) turns token auth on, and the driver
then fails to connect (InvalidAuthToken)."""
NODE_IPS = ("127.0.0.2", "127.0.0.3")
"""Loopback addresses of the head and the second node. Not 127.0.0.1: Ray swaps that for the machine's
outward address, and the cluster's traffic must stay on loopback."""


@dataclass
class Cluster:
    address: str
    nodes: dict[str, str]
    """Custom resource -> node id."""
    processes: list[subprocess.Popen]
    temp_dir: str

    def add_second_node(self) -> None:
        port = int(self.address.rsplit(":", 1)[1])
        self.processes.append(start_node(NODE_RESOURCES[1], self.temp_dir, port, head=False))
        self.nodes = wait_for_nodes(2)

    def raylet_of_second_node(self) -> int:
        """The pid of the second node's raylet: the child of its ``ray start`` named raylet."""
        parent = self.processes[1].pid
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                name, fields = (
                    stat[stat.index("(") + 1 : stat.rindex(")")],
                    stat[stat.rindex(")") + 2 :].split(),
                )
                if name == "raylet" and int(fields[1]) == parent:
                    return int(entry.name)
        raise AssertionError("the second node has no raylet")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_node(resource: str, temp_dir: str, head_port: int, head: bool) -> subprocess.Popen:
    where = ["--head", "--port", str(head_port), "--temp-dir", temp_dir, "--include-dashboard=false"]
    where += ["--node-ip-address", NODE_IPS[0]]
    if not head:
        where = ["--address", f"{NODE_IPS[0]}:{head_port}", "--node-ip-address", NODE_IPS[1]]
    command = [
        str(RAY), "start", *where, "--num-cpus", "1",
        "--resources", json.dumps({resource: 1}), "--object-store-memory", str(100 * 2**20),
        "--disable-usage-stats", "--block",
    ]  # fmt: skip
    log = Path(temp_dir) / f"{resource}.log"
    env = {**os.environ, **FAST_NODE_DEATH, **WITHOUT_TOKEN_AUTH}
    return subprocess.Popen(
        command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def wait_for_port(port: int, timeout: float = 120) -> None:
    """Until the head's GCS accepts connections on ``port``."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex((NODE_IPS[0], port)) == 0:
                return
        assert time.monotonic() < deadline, f"the Ray head did not listen on {port} in {timeout} s"
        time.sleep(0.2)


def wait_for_nodes(count: int, timeout: float = 120) -> dict[str, str]:
    """Custom resource -> node id once ``count`` nodes are alive (this process has joined the cluster)."""
    import ray

    deadline = time.monotonic() + timeout
    while len([node for node in ray.nodes() if node["Alive"]]) < count:
        assert time.monotonic() < deadline, f"fewer than {count} Ray nodes came up in {timeout} s"
        time.sleep(0.2)
    alive = [node for node in ray.nodes() if node["Alive"]]
    nodes = {name: node["NodeID"] for node in alive for name in node["Resources"] if name in NODE_RESOURCES}
    assert set(nodes) == set(NODE_RESOURCES[:count]), nodes
    return nodes


@contextlib.contextmanager
def local_cluster(nodes: int = 2) -> Iterator[Cluster]:
    """A head and, with ``nodes=2``, a second node (:meth:`Cluster.add_second_node` adds it later), with
    this process joined as the driver (so ``--executor ray`` runs here reuse the nodes' actors)."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="hgray")  # short: Ray's socket paths must fit in 107 bytes
    port = free_port()
    processes = [start_node(NODE_RESOURCES[0], temp_dir, port, head=True)]
    driver_env = mock.patch.dict(os.environ, WITHOUT_TOKEN_AUTH)  # this process and the runs it starts
    driver_env.start()
    try:
        if nodes == 2:
            processes.append(start_node(NODE_RESOURCES[1], temp_dir, port, head=False))  # waits for the head
        wait_for_port(port)
        ray.init(
            address=f"{NODE_IPS[0]}:{port}",
            _node_ip_address=NODE_IPS[0],  # the driver is on the head's machine
            logging_level="ERROR",
            log_to_driver=False,
        )
        yield Cluster(f"{NODE_IPS[0]}:{port}", wait_for_nodes(nodes), processes, temp_dir)
    finally:
        ray.shutdown()
        driver_env.stop()
        for process in reversed(processes):  # every Ray process of a node is in its `ray start` group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 1  # a graceful stop takes longer; nothing is kept
        for process in reversed(processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)
        shutil.rmtree(temp_dir, ignore_errors=True)
