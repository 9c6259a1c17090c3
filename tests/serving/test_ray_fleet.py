"""``EnvFleet`` (serving/ray_fleet.py) on a real two-node Ray cluster started on this machine:
``hopgym serve fleet`` prints URLs episodes play on and stops its servers on Ctrl-C; two env servers, one
per node, the second node killed (its whole process group, SIGKILL) mid-episode: every episode still ends
equal to in process, those the dead node's server had played again whole on the head's; after the fleet
closes no server or sandbox worker process is left (read in /proc)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extras import require_extra, unavailable

if importlib.util.find_spec("ray") is None:
    unavailable("needs hopgym[ray]", module_level=True)
require_extra("openenv.core", "serve")

from tests.ray_cluster import NODE_IPS, Cluster, local_cluster  # noqa: E402
from tests.servers import alive, descendants, wait_until  # noqa: E402
from tests.toolhop_episodes import Policies, as_played, expected, play  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray-cluster")
EPISODES = 8
KEY = "fleet-test-key"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with local_cluster() as made:
        yield made


def fleet_processes(cluster: Cluster) -> list[int]:
    """The live processes of the cluster's nodes that are env server actors (Ray names them by class)."""
    found = []
    for pid in [pid for process in cluster.processes for pid in descendants(process.pid)]:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::EnvServerActor"):
                found.append(pid)
        except OSError:
            continue
    return found


def refused(url: str) -> bool:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) != 0


def test_serve_fleet_prints_urls_episodes_play_on_and_ctrl_c_stops_the_servers(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hopgym serve fleet`` in this process (already joined to the cluster), Ctrl-C from a thread that
    plays episodes on the URLs it printed."""
    from hopgym.cli import main
    from hopgym.serving.remote_rollouts import on_servers

    monkeypatch.setenv("HOPGYM_SERVE_API_KEY", KEY)
    seen: dict[str, object] = {}

    def client() -> None:
        try:
            printed, deadline = "", time.monotonic() + 300
            while "ready:" not in printed and time.monotonic() < deadline:
                printed += capsys.readouterr().out
                time.sleep(0.1)
            urls = re.findall(r"--env-url (\S+)", printed)
            seen["urls"], seen["actors"] = urls, fleet_processes(cluster)

            async def scenario() -> list:
                rollouts = on_servers(urls, KEY)("ToolHop-v0", None, 4)
                await rollouts.start()
                try:
                    return await play(rollouts, Policies(), range(4))
                finally:
                    await rollouts.close()

            seen["played"] = asyncio.run(scenario())
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=client)
    thread.start()
    assert main(["serve", "fleet", "--servers", "2", "--ray-address", cluster.address]) == 130
    thread.join()
    urls, played = seen["urls"], seen["played"]
    assert len(urls) == 2 and len(seen["actors"]) == 2
    assert [as_played(r) for r in played] == expected(range(4))
    assert {r.server for r in played} == set(urls)  # both servers played
    assert wait_until(
        lambda: fleet_processes(cluster) == [] and all(refused(url) for url in urls), timeout=60
    )


def test_a_fleet_without_a_key_or_servers_is_refused_before_joining_a_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hopgym.errors import ConfigError
    from hopgym.serving.ray_fleet import EnvFleet

    monkeypatch.delenv("HOPGYM_SERVE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="give their key in \\$HOPGYM_SERVE_API_KEY or --api-key-file"):
        from hopgym.cli import build_parser
        from hopgym.commands.serve import serve_fleet

        serve_fleet(build_parser().parse_args(["serve", "fleet", "--servers", "2"]))
    with pytest.raises(ConfigError, match="a fleet needs at least one server, got 0"):
        EnvFleet(0, "ToolHop-v0", address="127.0.0.1:9")


def test_a_fleet_with_a_node_killed_mid_run_plays_every_episode_and_leaves_no_process(
    cluster: Cluster,
) -> None:
    """Last in this file: the second node does not come back."""
    from hopgym.serving.ray_fleet import EnvFleet

    fleet = EnvFleet(2, "ToolHop-v0", address=cluster.address)
    where = {
        url.split("//", 1)[1].rsplit(":", 1)[0]: (url, pid)
        for url, pid in zip(fleet.urls, fleet.pids, strict=True)
    }
    assert set(where) == set(NODE_IPS)  # one server per node
    (head, head_pid), (second, second_pid) = where[NODE_IPS[0]], where[NODE_IPS[1]]
    workers: list[int] = []

    def kill_second_node() -> None:
        workers.extend(descendants(head_pid) + descendants(second_pid))
        os.killpg(cluster.processes[1].pid, signal.SIGKILL)
        assert wait_until(lambda: not alive(second_pid), timeout=60)

    async def scenario() -> list:
        rollouts = fleet.rollouts()("ToolHop-v0", None, EPISODES)
        await rollouts.start()
        try:
            return await play(rollouts, Policies(on_second_turn=kill_second_node), range(EPISODES))
        finally:
            await rollouts.close()

    try:
        played = asyncio.run(scenario())
    finally:
        fleet.close()
    # checked before the cluster stops (which ends every process of its nodes): close() ended them
    assert workers  # the servers' sandbox workers, seen while the episodes ran
    assert wait_until(lambda: not any(alive(pid) for pid in [*fleet.pids, *workers]), timeout=60)

    assert [r.error for r in played] == [None] * EPISODES
    assert [as_played(r) for r in played] == expected(range(EPISODES))
    assert {r.server for r in played} == {head}
    replayed = [r for r in played if r.cut_off]
    assert len(replayed) == EPISODES // 2 and all(r.cut_off[0].startswith(f"{second}: ") for r in replayed)
