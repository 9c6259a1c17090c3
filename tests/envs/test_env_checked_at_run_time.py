"""The env contract is checked at run time, not only in tests (Gymnasium's ``PassiveEnvChecker``): ``hopgym
eval`` and ``hopgym serve env`` check each env's first reset and first step, and a third-party env that
breaks a rule fails with a ``ContractError`` naming the env id and the rule (every episode of it, not only
the first); ``--disable-env-checker`` (the env kwarg ``disable_env_checker``) opts out; and the same env
kept whole runs on. The broken envs are the throwaway env of tests/test_env_declares.py with one rule
broken each, registered as third-party ids."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.cli import main
from hopgym.envs.chat import Score
from hopgym.envs.env_checker import ContractChecker
from hopgym.errors import ConfigError, ContractError, EnvServerError
from hopgym.serving.rollouts import make_env
from tests.extras import require_extra
from tests.servers import hopgym
from tests.test_env_declares import ENV_ID, RiddleEnv

MODULE = "tests.envs.test_env_checked_at_run_time"


class LosesTurn(RiddleEnv):
    """Broken on reset: its info lacks ``turn``."""

    def _info(self, records: list[Any]) -> dict[str, Any]:
        return {key: value for key, value in super()._info(records).items() if key != "turn"}


class TextMetric(RiddleEnv):
    """Broken on its first (final) step: a metric value that is text, which no summary can average."""

    def _score(self, message: Mapping[str, Any]) -> Score:
        score = super()._score(message)
        return Score(score.reward, score.correct, score.answer, metrics={"riddle_exact": "yes"})


BROKEN = {"LosesTurn-v0": LosesTurn, "TextMetric-v0": TextMetric}
for _env_id, _env in BROKEN.items():
    if _env_id not in gym.registry:
        gym.register(_env_id, entry_point=_env)


def answering(request: dict[str, Any]) -> ScriptedReply:
    """Answers at once: the first step ends the episode."""
    return ScriptedReply(content="42")


def evaluate(env_id: str, out: Path, *flags: str) -> int:
    with ScriptedModelServer(answering) as server:
        argv = ["eval", "--env", env_id, "--model", server.model, "--api-base", server.api_base]
        argv += ["--api-key", "sk-test", "--out", str(out), "--no-progress", "--env-arg", "plan=false"]
        return main([*argv, *flags])


def errors(out: Path) -> list[str | None]:
    return [json.loads(line)["error"] for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("env_id", "rule"),
    [
        ("LosesTurn-v0", r"info keys \(reset\): missing \['turn'\]"),
        ("TextMetric-v0", "terminal info keys: metrics values must be numbers or None"),
    ],
)
def test_eval_fails_every_episode_of_a_broken_env_with_its_id_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env_id: str, rule: str
) -> None:
    assert evaluate(f"{MODULE}:{env_id}", tmp_path / "broken", "--concurrency", "1") == 1
    failed = errors(tmp_path / "broken")
    assert len(failed) == 3 and all(
        error and error.startswith(f"ContractError: env {MODULE}:{env_id} breaks the env contract")
        for error in failed
    )
    assert re.search(rule, failed[0])
    said = capsys.readouterr().err
    assert "(3 of 3 episodes failed): ContractError: env" in said and "disable_env_checker=true" in said
    # opted out, the run goes on (and records what the env said); the env it breaks runs whole
    assert evaluate(env_id, tmp_path / "unchecked", "--disable-env-checker") in (0, 1)
    assert not any(error and "ContractError" in error for error in errors(tmp_path / "unchecked"))
    assert evaluate(ENV_ID, tmp_path / "whole") == 0
    assert errors(tmp_path / "whole") == [None, None, None]


def test_the_checker_checks_only_the_first_reset_and_step_and_opts_out_as_gymnasium_does() -> None:
    env = make_env(ENV_ID, {"plan": False})
    try:
        assert isinstance(env, ContractChecker)
        for index in range(3):
            env.reset(options={"index": index})
            assert env.step("42")[2]
        assert env._before is None and env._broken is None  # nothing left to check
    finally:
        env.close()
    env = make_env("LosesTurn-v0", {"disable_env_checker": True})
    try:
        assert not isinstance(env, ContractChecker)
        assert "turn" not in env.reset(options={"index": 0})[1]
    finally:
        env.close()
    with pytest.raises(ConfigError, match="disable_env_checker must be true or false, got 'yes'"):
        make_env(ENV_ID, {"disable_env_checker": "yes"})


def test_serve_env_refuses_to_start_an_env_broken_on_reset() -> None:
    require_extra("openenv.core", "serve")  # skipped outside CI only
    refused = subprocess.run(
        hopgym("serve", "env", "--env", f"{MODULE}:LosesTurn-v0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "ready:" not in refused.stdout
    assert f"env {MODULE}:LosesTurn-v0 breaks the env contract, info keys (reset)" in refused.stderr


def test_serve_env_answers_a_session_whose_env_broke_a_rule_with_the_rule_and_keeps_serving() -> None:
    require_extra("openenv.core", "serve")  # skipped outside CI only
    import asyncio

    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction
    from tests.servers import env_server_in_thread

    async def session(url: str) -> list[str]:
        """A step the checker refuses, then a reset in the same session: both answered with the rule."""
        answers = []
        async with HopgymEnvClient(url, api_key="k") as client:
            await client.reset(index=0)
            for request in (lambda: client.step(HopgymAction.of("42")), lambda: client.reset(index=1)):
                try:
                    await request()
                except EnvServerError as exc:
                    answers.append(str(exc))
        return answers

    with env_server_in_thread("k", "TextMetric-v0", {"plan": False}) as url:
        answers = asyncio.run(session(url))
        assert urllib.request.urlopen(f"{url}/health").status == 200  # the server goes on
    assert len(answers) == 2
    assert all(
        "env TextMetric-v0 breaks the env contract, terminal info keys" in answer for answer in answers
    )


def test_a_broken_env_is_a_typed_error_where_python_code_makes_it() -> None:
    env = make_env("TextMetric-v0", {"plan": False})
    try:
        env.reset(options={"index": 0})
        with pytest.raises(ContractError, match="env TextMetric-v0 breaks the env contract, terminal info"):
            env.step("42")
        with pytest.raises(ContractError, match="terminal info keys"):
            env.reset(options={"index": 1})  # it stays refused
    finally:
        env.close()
