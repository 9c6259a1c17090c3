"""``EnvFleet`` (agents/adapters/ray_fleet.py) on a real two-node Ray cluster started on this machine: two env
servers, one per node; the second node killed (its whole process group, SIGKILL) mid-episode; every episode
still ends equal to in process, those the dead node's server had played again whole on the head's; after the
fleet closes no server or sandbox worker process is left (read in /proc)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal

import pytest

from tests.extras import require_extra, unavailable

if importlib.util.find_spec("ray") is None:
    unavailable("needs hopgym[ray]", module_level=True)
require_extra("openenv.core", "serve")

from tests.ray_cluster import NODE_IPS, local_cluster  # noqa: E402
from tests.test_remote_rollouts import Policies, alive, as_played, expected, play  # noqa: E402
from tests.test_serve_env import descendants, wait_until  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray-cluster")
EPISODES = 8


def test_a_fleet_with_a_node_killed_mid_run_plays_every_episode_and_leaves_no_process() -> None:
    from hopgym.agents.adapters.ray_fleet import EnvFleet

    with local_cluster() as cluster:
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
        # checked before the cluster stops (which ends every process of its nodes)
        assert workers  # the servers' sandbox workers, seen while the episodes ran
        assert wait_until(lambda: not any(alive(pid) for pid in [*fleet.pids, *workers]), timeout=60)

    assert [r.error for r in played] == [None] * EPISODES
    assert [as_played(r) for r in played] == expected(range(EPISODES))
    assert {r.server for r in played} == {head}
    replayed = [r for r in played if r.cut_off]
    assert len(replayed) == EPISODES // 2 and all(r.cut_off[0].startswith(f"{second}: ") for r in replayed)
