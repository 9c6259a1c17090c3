"""An env says what it is (``ChatToolEnv.first_turn``, ``paper_metrics``, ``paper_tables``) and the other
layers read it: a throwaway env defined here, with tasks, a tool, a metric, a paper table and a first turn
of its own, is evaluated (``hopgym eval``), reported (``hopgym report``), served (the OpenEnv app in this
process) and put through the verifiers adapter with no edit outside its definition; an agent for another
first turn, and training, refuse it before any episode. And no code above ``envs/`` names an env class, an
env-specific kwarg or a paper metric (the registry and the env folders alone know them)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import pytest

import hopgym
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.agents.policies.fc import FunctionCallingAgent
from hopgym.agents.policies.registry import AGENTS
from hopgym.cli import main
from hopgym.envs.chat import ChatToolEnv, EpisodeStart, Score, SpecialTurn
from hopgym.envs.env_options import env_class
from hopgym.errors import ConfigError
from hopgym.sandbox.base import Sandbox
from tests.extras import require_extra
from tests.package_imports import FOLDERS
from tests.paths import ROOT

ENV_ID = "DoubleRiddle-v0"
PLAN = "PLAN: double the number"
PLAN_TURN = "plan"
METRIC = "riddle_exact"


@dataclass(frozen=True)
class Riddle:
    id: str
    number: int


RIDDLES = (Riddle("r1", 21), Riddle("r2", 50), Riddle("r3", 7))
DOUBLE = "def double(x):\n    return 2 * x\n"
DOUBLE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "double",
        "description": "Twice x.",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    },
}


class RiddleEnv(ChatToolEnv[Riddle]):
    """Three riddles; the first turn is a plan the env reads its own way (it rewrites the question to hold
    it), then a standard tool-use turn; its paper metric is ``riddle_exact``, its paper table one row."""

    def __init__(
        self,
        sandbox: str | Sandbox = "process",
        sandbox_options: Mapping[str, Any] | None = None,
        max_turns: int = 4,
        plan: bool = True,
    ) -> None:
        super().__init__(max_turns)
        self.plan = plan
        self._use_tasks(RIDDLES)
        self._use_sandbox(sandbox, sandbox_options)

    @property
    def first_turn(self) -> str:
        return PLAN_TURN if self.plan else super().first_turn

    @property
    def paper_metrics(self) -> tuple[str, ...]:
        return (METRIC,)

    @classmethod
    def paper_tables(cls, metrics: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str | None:
        solved = sum(episode.get(METRIC) or 0 for episode in metrics)
        return f"Riddle table\n\n| solved |\n|---:|\n| {solved:g} of {len(metrics)} |"

    def _episode_start(self, task: Riddle) -> EpisodeStart:
        assert self.sandbox is not None
        self.sandbox.load([DOUBLE])
        question = {"role": "user", "content": f"What is twice {task.number}?"}
        return EpisodeStart((DOUBLE_SCHEMA,), [{"role": "system", "content": "Use the tools."}, question])

    def _special_turn(self, action: dict[str, Any] | str, turn: int) -> SpecialTurn | None:
        if not self.plan or turn != 1:
            return None
        plan = action if isinstance(action, str) else str(action.get("content") or "")
        question = self._messages[1]
        return SpecialTurn(replaced={1: {**question, "content": f"{question['content']} ({plan})"}})

    def _score(self, message: Mapping[str, Any]) -> Score:
        assert self._task is not None
        gold = 2 * self._task.number
        correct = str(message.get("content") or "").strip() == str(gold)
        return Score(float(correct), correct, gold, metrics={METRIC: float(correct)})

    def _episode_info(self) -> dict[str, Any]:
        assert self._task is not None
        return {"task_id": self._task.id, "hops": 1}


class PlanningAgent(FunctionCallingAgent):
    """Writes the env's plan turn first, then calls tools as ``fc`` does."""

    name = "planner"
    first_turn: ClassVar[str] = PLAN_TURN

    async def act(self, observation: Any, info: Mapping[str, Any]) -> Any:
        if info["turn"] == 0:
            return {"role": "assistant", "content": PLAN}
        return await super().act(observation, info)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=RiddleEnv)


def doubling(request: dict[str, Any]) -> ScriptedReply:
    """Calls ``double`` on the question's number, then answers the tool's result."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return ScriptedReply(content=str(json.loads(messages[-1]["content"])))
    number = int(re.search(r"twice (\d+)", messages[1]["content"]).group(1))
    return ScriptedReply(tool_calls=(("double", {"x": number}),))


@pytest.fixture
def planner(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(AGENTS, PlanningAgent.name, PlanningAgent)
    return PlanningAgent.name


def test_the_env_is_evaluated_reported_and_printed_in_its_paper_layout(
    tmp_path: Path, planner: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(doubling) as server:
        argv = ["eval", "--env", ENV_ID, "--agent", planner, "--model", server.model]
        argv += ["--api-base", server.api_base, "--api-key", "sk-test", "--out", str(out), "--no-progress"]
        assert main(argv) == 0
        questions = [r["messages"][1]["content"] for r in server.requests]
    assert all(q.endswith(f"({PLAN})") for q in questions)  # the env read the plan turn its own way
    printed = capsys.readouterr().out
    assert "| 3 of 3 |" in printed  # the env's own paper table
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in records) == ["r1", "r2", "r3"]
    assert all(r["correct"] and r["metrics"] == {METRIC: 1.0} and r["turns"] == 3 for r in records)
    assert main(["report", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert json.dumps(summary).count(f'"{METRIC}": 1.0') >= 1


def test_an_agent_for_another_first_turn_and_training_refuse_the_env_before_any_episode(
    tmp_path: Path, planner: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hopgym.train.rollout import check_env

    with ScriptedModelServer(doubling) as server:
        argv = ["eval", "--env", ENV_ID, "--model", server.model, "--api-base", server.api_base]
        argv += ["--api-key", "sk-test", "--no-progress"]
        assert main([*argv, "--agent", "fc", "--out", str(tmp_path / "fc")]) == 2
        refused = capsys.readouterr().err
        assert re.search(r"--agent fc writes a 'standard' first turn.* as 'plan'.*\(planner\)", refused)
        assert server.requests == [] and not (tmp_path / "fc").exists()
        plain = ["--agent", "fc", "--env-arg", "plan=false", "--out", str(tmp_path / "plain")]
        assert main([*argv, *plain]) == 0  # without its plan turn, a standard agent plays it
        assert len(server.requests) == 6
    env = gym.make(ENV_ID)
    try:
        with pytest.raises(ConfigError, match=f"reads its first turn as '{PLAN_TURN}'"):
            check_env(env, ENV_ID)
    finally:
        env.close()


def test_the_env_is_served_by_the_openenv_app_in_process() -> None:
    require_extra("openenv.core", "serve")  # skipped outside CI only
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction
    from tests.servers import env_server_in_thread

    async def episode(url: str) -> tuple[float, bool, Mapping[str, Any]]:
        async with HopgymEnvClient(url, api_key="k") as client:
            await client.reset(index=0)
            await client.step(HopgymAction.of({"role": "assistant", "content": PLAN}))
            call = {"id": "c1", "type": "function", "function": {"name": "double", "arguments": '{"x": 21}'}}
            step = await client.step(
                HopgymAction.of({"role": "assistant", "content": None, "tool_calls": [call]})
            )
            assert "42" in step.observation.messages[-1]["content"]  # run in the served env's sandbox
            result = await client.step(HopgymAction.of({"role": "assistant", "content": "42"}))
            return float(result.reward or 0.0), bool(result.done), result.observation.info

    with env_server_in_thread("k", ENV_ID) as url:
        reward, done, info = asyncio.run(episode(url))
    assert (reward, done, info["metrics"]) == (1.0, True, {METRIC: 1.0})


def test_the_verifiers_adapter_reports_the_env_paper_metric() -> None:
    require_extra("verifiers", "verifiers")  # skipped outside CI only
    import verifiers as vf

    from hopgym.serving.rollouts import Rollouts
    from hopgym.serving.verifiers_env import HopgymEnv

    async def scenario() -> dict[str, float]:
        env = HopgymEnv(Rollouts(ENV_ID, concurrency=1))
        columns = {func.__name__: func for func in env.rubric._get_reward_funcs()}
        assert METRIC in columns
        state = vf.State(trajectory_id="a", info={"index": 1})
        try:
            await env.setup_state(state)
            await env.env_response([vf.AssistantMessage(content=PLAN)], state)
            await env.env_response([vf.AssistantMessage(content="100")], state)
            return {name: await columns[name](state) for name in (METRIC, "answer_correctness")}
        finally:
            await env.give_back_env(state)
            await env.close_envs()

    assert asyncio.run(scenario()) == {METRIC: 1.0, "answer_correctness": 1.0}


# -- no code above envs/ knows a specific env -----------------------------------------------------------

ENV_CLASSES = {entry_point.rpartition(":")[2] for entry_point in hopgym._ENVS.values()}
ENV_KWARGS = ("kg_mode", "kg=")
EXEMPT = {
    ROOT / "hopgym" / "__init__.py": "the env registry",
    ROOT
    / "agents"
    / "policies"
    / "kgetool"
    / "agent.py": "FamilyTool's paper method, whose help names the env "
    "it was written for; it reads the env only through first_turn and info",
}
NOT_ABOVE_ENVS = {"hopgym", "tasks", "sandbox", "envs", "tools_generated"}
ABOVE_ENVS = [
    *(path for folder in FOLDERS if folder not in NOT_ABOVE_ENVS for path in (ROOT / folder).rglob("*.py")),
    *(ROOT / "hopgym").glob("*.py"),
    *(ROOT / "hopgym" / "commands").glob("*.py"),
    *(ROOT / "hopgym" / "inspect").glob("*.py"),
]
"""The package above ``envs/``: every layer folder above it (serving, agents, train; a new one joins by its
place in the layering), and ``hopgym/``'s own modules (the CLI, the Inspect adapter; its other entries are
links to the layer folders). ``tasks/`` and ``sandbox/`` sit below and cannot import an env."""


@pytest.fixture(scope="module")
def paper_metrics() -> list[str]:
    """Every paper metric the registered envs declare (FamilyTool's with ``kg="extract"``, its most)."""
    familytool = env_class("FamilyTool-v0")(kg="extract", max_turns=2)
    try:
        return sorted({*familytool.paper_metrics, *env_class("KGTool-v0").paper_metrics})
    finally:
        familytool.close()


def env_knowledge(source: str, metrics: Sequence[str]) -> list[str]:
    """What in ``source`` names an env class, an env-specific kwarg, or a paper metric as a string."""
    found = sorted(name for name in ENV_CLASSES if re.search(rf"\b{name}\b", source))
    found += [kwarg for kwarg in ENV_KWARGS if kwarg in source]
    return found + [metric for metric in metrics if re.search(rf"[\"']{re.escape(metric)}[\"']", source)]


def test_no_code_above_envs_names_an_env_class_kwarg_or_paper_metric(paper_metrics: list[str]) -> None:
    found = [
        f"{path.relative_to(ROOT)}: {', '.join(hits)}"
        for path in sorted(set(ABOVE_ENVS) - set(EXEMPT))
        if (hits := env_knowledge(path.read_text("utf-8"), paper_metrics))
    ]
    assert not found, "env knowledge outside envs/ (declare it on the env instead):\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_env_knowledge(paper_metrics: list[str]) -> None:
    assert {"tool_em", "kg_em", "hits@1"} <= set(paper_metrics) and len(ENV_CLASSES) == len(hopgym.ENV_IDS)
    assert env_knowledge("if isinstance(inner, FamilyToolEnv):\n", paper_metrics) == ["FamilyToolEnv"]
    assert env_knowledge('if getattr(inner, "kg_mode", None) == "extract":\n', paper_metrics) == ["kg_mode"]
    assert env_knowledge('columns = ("tool_em", "hits@1")\n', paper_metrics) == ["hits@1", "tool_em"]
    assert env_knowledge("the tool_em column; ToolHopEnvs; first_turn\n", paper_metrics) == []
    scanned = {path.name for path in ABOVE_ENVS}
    assert {"registry.py", "verifiers_env.py", "solver.py", "rollout.py"} <= scanned  # each layer above envs


def test_a_run_folder_naming_a_third_party_env_imports_no_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run folder is data: the ``module:Env-v0`` its run.json names is not imported to read it (a report
    or rescore of someone's run folder runs none of their code); the command line's ``--env`` is."""
    from hopgym.agents.evaluation.rescore import rescore_run
    from hopgym.agents.report.paper_tables import paper_tables_for_run
    from hopgym.envs.env_options import registered_id

    imported = tmp_path / "imported"
    (tmp_path / "planted_env.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"env": "planted_env:Planted-v0"}))
    (run / "episodes.jsonl").write_text("")
    assert paper_tables_for_run(run) is None
    with pytest.raises(ConfigError, match="unknown env 'planted_env:Planted-v0'"):
        rescore_run(run, tmp_path / "rescored")
    assert not imported.exists()
    with pytest.raises(ConfigError, match="unknown env 'planted_env:Planted-v0'"):
        registered_id("planted_env:Planted-v0")  # named on the command line: imported (it registers none)
    assert imported.exists()
