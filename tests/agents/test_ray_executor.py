"""``hopgym eval --executor ray`` on a real two-node Ray cluster started on this machine, and several model
servers behind one model: records equal the local executor's on ToolHop, FamilyTool and KGTool tasks, a
node killed mid-run loses and duplicates no episode, a failing server is left out and requests stay
balanced."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.cli import main
from hopgym.errors import ClusterError
from tests.ray_cluster import NODE_RESOURCES, Cluster, local_cluster
from tests.shared_data import needs_data

if importlib.util.find_spec("ray") is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI installs hopgym[ray]; these tests must run there")
    pytest.skip("needs hopgym[ray]", allow_module_level=True)
pytestmark = [
    needs_data("toolhop/toolhop_subset100.jsonl"),
    needs_data("familytool/familytool-e.jsonl"),
    # One worker, one cluster. Split over workers (xdist 3.8's loadgroup groups nothing under pytest 9),
    # each starts its own cluster, and the node kill, collected last, still runs last on its worker.
    pytest.mark.xdist_group("ray-cluster"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with local_cluster() as made:
        yield made


# -- a scripted model that plays every env -----------------------------------------------------------


def generic_policy(delay: float = 0.0):
    """First turn: call the first offered tool with each required parameter set to "x"; after a tool result,
    answer with a text. A pure function of the request, so both executors see the same replies."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        if any(message["role"] == "tool" for message in request["messages"]) or not request.get("tools"):
            return ScriptedReply(content="Final answer: Paris", delay=delay)
        function = request["tools"][0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),), delay=delay)

    return policy


def evaluate(
    server: ScriptedModelServer,
    out: Path,
    env_id: str,
    api_base: str | tuple[str, ...] | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    model = ModelConfig(
        server.model,
        api_base=api_base or server.api_base,
        api_key="sk",
        max_retries=4,
        backoff_base=0.01,
        endpoint_cooldown=0.05,
    )
    settings = {"limit": 4, "concurrency": 2, "progress": False, **options}
    EvalRun(EvalConfig(out=out, model=model, env_id=env_id, **settings)).run()
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def outcome(record: dict[str, Any]) -> dict[str, Any]:
    """What an episode came to, without what differs run to run (call ids, latencies, the node)."""
    return {
        "reward": record["reward"],
        "correct": record["correct"],
        "turns": record["turns"],
        "final_answer": record["final_answer"],
        "metrics": record["metrics"],
        "error": record["error"],
        "calls": [(call["name"], call["arguments"], call["status"]) for call in record["calls"]],
    }


@pytest.fixture(scope="module")
def kgtool_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kgtool") / "family.jsonl"
    argv = ["kg2tool", "sample", "--kg", "family-e", "--patterns", "1p,2p", "--n", "2", "--seed", "3"]
    assert main([*argv, "--out", str(path)]) == 0
    return path


def test_ray_records_equal_the_local_executors_on_every_env(
    cluster: Cluster, kgtool_tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(kgtool_tasks.parent)  # the KGTool tasks by a relative path: the nodes get it resolved
    envs = {
        "ToolHop-v0": {},
        "FamilyTool-v0": {},
        "KGTool-v0": {"data_path": kgtool_tasks.name, "kg": "family-e"},
    }
    nodes_used: Counter[str] = Counter()
    with ScriptedModelServer(generic_policy()) as server:
        for env_id, env_kwargs in envs.items():
            local = evaluate(server, tmp_path / env_id / "local", env_id, env_kwargs=env_kwargs)
            on_ray = evaluate(
                server,
                tmp_path / env_id / "ray",
                env_id,
                env_kwargs=env_kwargs,
                executor="ray",
                ray_address=cluster.address,
            )
            assert sorted(r["task_id"] for r in on_ray) == sorted(r["task_id"] for r in local)
            assert len(on_ray) == 4 and all(r["error"] is None for r in local)
            by_task = {r["task_id"]: outcome(r) for r in local}
            assert {r["task_id"]: outcome(r) for r in on_ray} == by_task, env_id
            assert all(outcome["calls"] for outcome in by_task.values()), env_id
            summaries = [
                json.loads((tmp_path / env_id / e / "summary.json").read_text()) for e in ("local", "ray")
            ]
            assert summaries[0]["answer_correctness"] == summaries[1]["answer_correctness"]
            nodes_used.update(r["node"] for r in on_ray)
    assert set(nodes_used) == set(cluster.nodes.values())  # episodes ran on both nodes


def test_two_servers_one_failing_for_a_while_balance_and_lose_nothing_on_both_executors(
    cluster: Cluster, tmp_path: Path
) -> None:
    failures_left = [3]

    def flaky(request: dict[str, Any]) -> ScriptedReply:
        if failures_left[0] > 0:
            failures_left[0] -= 1
            return ScriptedReply(status=500)
        return generic_policy(delay=0.3)(request)

    for executor in ("local", "ray"):
        failures_left[0] = 3
        with ScriptedModelServer(flaky) as failing, ScriptedModelServer(generic_policy(delay=0.3)) as healthy:
            records = evaluate(
                failing,
                tmp_path / executor,
                "ToolHop-v0",
                api_base=(failing.api_base, healthy.api_base),
                limit=12,
                concurrency=4,
                executor=executor,
                ray_address=cluster.address,
            )
            served = {"failing": len(failing.requests) - 3, "healthy": len(healthy.requests)}
        assert sorted(r["index"] for r in records) == list(range(12)), executor
        assert all(r["error"] is None and r["turns"] == 2 for r in records), executor
        assert sum(r["agent"]["retries"] for r in records) == 3  # each 500 retried once, elsewhere
        total = served["failing"] + served["healthy"]
        assert total == 24 and min(served.values()) >= total / 4, (executor, served)


def test_without_ray_the_ray_executor_fails_with_one_line_naming_the_extra(tmp_path: Path) -> None:
    hide_ray = (
        "import sys; sys.modules['ray'] = None; from hopgym.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    command = [
        sys.executable, "-c", hide_ray, "eval", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1",
        "--executor", "ray", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "hopgym: error: --executor ray needs Ray: pip install 'hopgym[ray]'"
    assert not (tmp_path / "run").exists()


def test_the_embedded_local_model_is_refused_with_the_ray_executor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "--model", "local", "--executor", "ray", "--out", str(tmp_path / "run")])
    assert code == 2 and not (tmp_path / "run").exists()
    assert "--model local serves this machine only" in capsys.readouterr().err


def test_a_run_no_node_can_start_fails_naming_the_nodes_cause(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tasks file is on the driver but not on the nodes (here: the nodes are sent a path that does not
    exist): no node starts, and the run says why and how to go on."""
    from hopgym.agents.evaluation import ray_executor

    missing = str(tmp_path / "only-on-the-driver.jsonl")
    sent = ray_executor.for_nodes
    monkeypatch.setattr(
        ray_executor, "for_nodes", lambda config: replace(sent(config), env_kwargs={"data_path": missing})
    )
    with ScriptedModelServer(generic_policy()) as server, pytest.raises(ClusterError) as raised:
        evaluate(server, tmp_path / "run", "ToolHop-v0", executor="ray", ray_address=cluster.address)
    message = str(raised.value)
    assert message.startswith("every Ray node running episodes failed, 4 episodes left (rerun with --resume)")
    assert f"the last cause: DataError: ToolHop data_path {missing!r} is not a file" in message


def test_a_stopped_ray_run_resumes_with_every_episode_once(cluster: Cluster, tmp_path: Path) -> None:
    """Ctrl-C reaches the run as a cancel: episodes still out on the nodes are dropped with their actors,
    and ``--resume`` runs exactly the missing ones."""
    out = tmp_path / "run"
    episodes = out / "episodes.jsonl"

    def interrupt_after_the_first_record() -> None:
        deadline = time.monotonic() + 120
        while not (episodes.exists() and episodes.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)

    with ScriptedModelServer(generic_policy(delay=0.5)) as server:
        threading.Thread(target=interrupt_after_the_first_record, daemon=True).start()
        options = {"limit": 12, "executor": "ray", "ray_address": cluster.address}
        with pytest.raises(KeyboardInterrupt):
            evaluate(server, out, "ToolHop-v0", **options)
        stopped = episodes.read_text().splitlines()
        resumed = evaluate(server, out, "ToolHop-v0", resume=True, **options)
    assert 0 < len(stopped) < 12
    assert sorted(r["index"] for r in resumed) == list(range(12))  # every episode, exactly once
    assert [json.loads(line) for line in stopped] == resumed[: len(stopped)]


def test_killing_the_second_node_mid_run_loses_and_duplicates_no_episode(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last in this file: the second node does not come back. ``hopgym eval --executor ray`` runs in a
    thread of this process (the driver already joined, so the nodes' actors from the tests above are
    reused) while this thread kills the second node's raylet once an episode finished there."""
    out = tmp_path / "run"
    episodes = out / "episodes.jsonl"
    second = cluster.nodes[NODE_RESOURCES[1]]
    with ScriptedModelServer(generic_policy(delay=0.5)) as server:
        argv = [
            "eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--limit", "10", "--concurrency", "2", "--out", str(out), "--no-progress",
            "--executor", "ray", "--ray-address", cluster.address,
        ]  # fmt: skip
        codes: list[int] = []
        run = threading.Thread(target=lambda: codes.append(main(argv)))
        run.start()
        deadline = time.monotonic() + 120
        while not (episodes.exists() and second in episodes.read_text()):
            assert run.is_alive() and time.monotonic() < deadline, "no episode finished on the second node"
            time.sleep(0.05)
        os.kill(cluster.raylet_of_second_node(), signal.SIGKILL)
        killed_after = len(episodes.read_text().splitlines())
        run.join(timeout=180)
    assert codes == [0], capsys.readouterr().err
    records = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert sorted(r["index"] for r in records) == list(range(10))  # every episode, exactly once
    assert all(r["error"] is None for r in records)
    assert killed_after < 10 and records[-1]["node"] == cluster.nodes[NODE_RESOURCES[0]]  # the rest: head
    assert "Answer correctness" in capsys.readouterr().out
