"""verifiers' own evaluation entry point (``vf-eval``, verifiers 0.3.1) drives ToolHop-v0, FamilyTool-v0 and
KGTool-v0 through hopgym's verifiers environment module against ``hopgym serve scripted``: every task's answer
correctness and each env's own paper columns equal ``hopgym eval`` on the same scripted replies, and each
rollout carries the row's tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.extras import require_extra

require_extra("verifiers", "verifiers")

from hopgym.cli import main  # noqa: E402
from tests.paths import ROOT  # noqa: E402
from tests.servers import model_server  # noqa: E402

ENV_MODULE = ROOT / "environments" / "hopgym_env"
ROWS = 4
PAPER_COLUMNS = {
    "ToolHop-v0": (),
    "FamilyTool-v0": ("tool_em", "tool_acc", "value_acc"),
    "KGTool-v0": ("precision", "recall", "f1", "hits@1"),
}
"""Each env's own per-episode columns, which the rubric takes from its ``info["metrics"]``."""
ENVS = {
    "ToolHop-v0": {},
    "FamilyTool-v0": {},
    "KGTool-v0": {"kg": "family-e", "patterns": "1p,2i", "n": 2, "seed": 0},
}


def vf_eval_config(model: str, api_base: str, out: Path) -> str:
    """One ``[[eval]]`` per env, run in the vf-eval process itself (no env server process)."""
    lines = [
        "disable_env_server = true",
        "save_results = true",
        f'output_dir = "{out}"',
        f'model = "{model.removeprefix("openai/")}"',
        f'api_base_url = "{api_base}"',
        'api_key_var = "SCRIPTED_KEY"',
        f"num_examples = {ROWS}",
        "rollouts_per_example = 1",
    ]
    for env_id, kwargs in ENVS.items():
        lines += ["", "[[eval]]", 'id = "hopgym-env"', "[eval.env_args]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in {"env": env_id, **kwargs}.items()]
    return "\n".join(lines) + "\n"


def test_vf_eval_answer_correctness_equals_hopgym_eval_on_the_same_scripted_replies(tmp_path: Path) -> None:
    config = tmp_path / "evals.toml"
    with model_server() as (model, api_base, api_key):
        config.write_text(vf_eval_config(model, api_base, tmp_path / "vf"))
        environment = {
            **os.environ,
            "SCRIPTED_KEY": api_key,
            "PYTHONPATH": os.pathsep.join([str(ENV_MODULE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        command = [sys.executable, "-m", "verifiers.legacy.scripts.eval", str(config), "--disable-tui"]
        done = subprocess.run(
            command, env=environment, capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
        expected = {}
        for env_id, kwargs in ENVS.items():
            out = tmp_path / env_id
            args = ["eval", "--env", env_id, "--model", model, "--api-base", api_base, "--api-key", api_key]
            args += [arg for key, value in kwargs.items() for arg in ("--env-arg", f"{key}={value}")]
            assert main([*args, "--limit", str(ROWS), "--out", str(out), "--no-progress"]) == 0
            records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
            expected[env_id] = {r["task_id"]: (float(r["correct"]), r["metrics"]) for r in records}
    results = sorted((tmp_path / "vf").rglob("results.jsonl"))
    assert len(results) == len(ENVS)
    seen = {}
    for path in results:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        metadata = json.loads((path.parent / "metadata.json").read_text())
        env_id = metadata["env_args"]["env"]
        columns = PAPER_COLUMNS[env_id]
        seen[env_id] = {
            row["info"]["task_id"]: (row["answer_correctness"], {key: row[key] for key in columns})
            for row in rows
        }
        for row in rows:
            assert row["error"] is None and row["reward"] == row["answer_correctness"]
            assert [tool["name"] for tool in row["tool_defs"]] == [
                t["name"] for t in row["info"]["tool_defs"]
            ]
    assert seen == {
        env: {
            task: (c, {key: got[key] or 0.0 for key in PAPER_COLUMNS[env]}) for task, (c, got) in rows.items()
        }
        for env, rows in expected.items()
    }
    assert any(c for rows in expected.values() for c, _ in rows.values()), "no answer was correct"


def test_an_env_whose_step_failed_is_closed_and_never_lent_again() -> None:
    """A step that raised (here a wrapper's error, as a sandbox that broke down) sends the env back
    unhealthy: the pool closes it and the next rollout gets a new env; a rollout that ended well gives its
    env back for the next one."""
    import asyncio

    import gymnasium as gym
    import verifiers as vf

    from hopgym.serving.rollouts import Rollouts
    from hopgym.serving.verifiers_env import HopgymEnv

    closed: list[gym.Env] = []
    reset: list[gym.Env] = []

    class Breakable(gym.Wrapper):
        def reset(self, **kwargs: Any) -> Any:
            reset.append(self)
            return super().reset(**kwargs)

        def step(self, action: Any) -> Any:
            if action.get("content") == "break":
                raise RuntimeError("the sandbox broke down")
            return super().step(action)

        def close(self) -> None:
            super().close()
            closed.append(self)

    class BreakableRollouts(Rollouts):
        def make_env(self) -> gym.Env:
            return Breakable(super().make_env())

    async def rollout(env: HopgymEnv, name: str, answer: str) -> Any:
        """One rollout's hooks as verifiers calls them; the env it was lent."""
        state = vf.State(trajectory_id=name, info={"index": 0})
        await env.setup_state(state)
        try:
            await env.env_response([vf.AssistantMessage(content=answer)], state)
        except RuntimeError:
            pass
        finally:
            await env.give_back_env(state)
        return reset[-1]

    async def scenario() -> None:
        env = HopgymEnv(BreakableRollouts("ToolHop-v0", concurrency=1))
        closed.clear()  # the env that built the dataset
        try:
            broken = await rollout(env, "a", "break")
            replacement = await rollout(env, "b", "Final answer: x")
            assert replacement is not broken
            assert await rollout(env, "c", "Final answer: y") is replacement
        finally:
            await env.close_envs()
        assert closed[0] is broken and replacement in closed[1:]

    asyncio.run(scenario())
