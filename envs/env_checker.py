"""``check_chat_env``: the hopgym env contract (docs/contracts.md) as a check, in the style of Gymnasium's
``check_env``, which checks the Gymnasium API but not what hopgym's agents, runner and summaries read.

It runs one short episode (a hallucinated tool and unparseable arguments, then a final answer) and raises
:class:`~hopgym.errors.ContractError` naming the rule an observation, ``info`` or call record breaks.

:class:`ContractChecker` runs the cheap part at run time, as Gymnasium's ``PassiveEnvChecker`` does: the
rules of an env's first reset and first step, whatever the agent sent (``hopgym eval`` and
``hopgym serve env`` wrap every env they make, unless the env kwargs hold :data:`DISABLE_ENV_CHECKER`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from hopgym.envs.calls import CALL_STATUSES, FAILURE_STATUSES
from hopgym.errors import ConfigError, ContractError, HopgymError

INFO_KEYS = ("task_id", "hops", "feedback", "isolation", "tool_choice", "turn", "num_calls", "calls")
"""Keys every ``reset`` and ``step`` info holds."""
TERMINAL_INFO_KEYS = ("correct", "answer", "metrics")
RECORDED_INFO_KEYS = ("task_id", "hops", "isolation", "calls", "correct", "answer", "metrics")
"""Info keys that reach episode records (episodes.jsonl), so they must be JSON data."""
CALL_RECORD_KEYS = ("id", "name", "arguments", "status", "errors", "feedback", "latency_ms", "truncated")
TOOL_CHOICES = ("required", "auto", "none", None)
UNKNOWN_TOOL = "check_chat_env_unknown_tool"
FINAL_ANSWER = "check_chat_env final answer"

DISABLE_ENV_CHECKER = "disable_env_checker"
"""The env kwarg (Gymnasium's ``gym.make`` keyword) that turns the run-time checks off: ``--env-arg
disable_env_checker=true`` or ``--disable-env-checker``."""

Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


def env_checker_option(env_kwargs: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether the kwargs turn the run-time checks off (:data:`DISABLE_ENV_CHECKER`), and the env's own
    kwargs without that key; :class:`ConfigError` unless its value is a bool."""
    kwargs = dict(env_kwargs)
    disabled = kwargs.pop(DISABLE_ENV_CHECKER, False)
    if not isinstance(disabled, bool):
        raise ConfigError(f"env kwarg {DISABLE_ENV_CHECKER} must be true or false, got {disabled!r}")
    return disabled, kwargs


def _require(condition: bool, rule: str, detail: str) -> None:
    if not condition:
        raise ContractError(f"{rule}: {detail} (docs/contracts.md)")


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def check_observation(env: gym.Env, observation: Any, where: str) -> None:
    """Observation rule: ``{"messages", "tools"}`` in the env's space, plain JSON data."""
    rule = f"observation ({where})"
    _require(isinstance(observation, Mapping), rule, f"must be a dict, got {type(observation).__name__}")
    _require(
        set(observation) == {"messages", "tools"}, rule, f"keys must be messages, tools: {set(observation)}"
    )
    _require(env.observation_space.contains(observation), rule, "not in the env's ChatObservationSpace")
    _require(_is_json(observation), rule, "must be JSON-serialisable (plain chat messages and tool schemas)")


def check_info(info: Any, where: str) -> None:
    """Info rule: the keys every step reports, JSON data where episode records copy them."""
    rule = f"info keys ({where})"
    _require(isinstance(info, Mapping), rule, f"info must be a dict, got {type(info).__name__}")
    missing = [key for key in INFO_KEYS if key not in info]
    _require(not missing, rule, f"missing {missing}; every reset and step info holds {list(INFO_KEYS)}")
    _require(isinstance(info["calls"], list), rule, "calls must be a list of call records")
    _require(
        info["tool_choice"] in TOOL_CHOICES,
        rule,
        f"tool_choice {info['tool_choice']!r} not in {TOOL_CHOICES}",
    )
    for key in RECORDED_INFO_KEYS:
        _require(key not in info or _is_json(info[key]), rule, f"{key} reaches episode records: must be JSON")


def check_call_record(record: Any, where: str) -> None:
    """Call-record rule: the keys, a known status, and ``status`` the first of ``errors`` (else ``ok``)."""
    rule = f"call record ({where})"
    _require(isinstance(record, Mapping), rule, f"must be a dict, got {type(record).__name__}")
    missing = [key for key in CALL_RECORD_KEYS if key not in record]
    _require(not missing, rule, f"missing {missing}; a call record holds {list(CALL_RECORD_KEYS)}")
    status, errors = record["status"], record["errors"]
    _require(status in CALL_STATUSES, rule, f"status {status!r} is not one of {list(CALL_STATUSES)}")
    _require(
        isinstance(errors, list) and all(e in FAILURE_STATUSES for e in errors),
        rule,
        f"errors must list failure statuses, got {errors!r}",
    )
    _require(status == (errors[0] if errors else "ok"), rule, f"status {status!r} must be errors[0] or ok")
    _require(isinstance(record["feedback"], str), rule, "feedback must be the text the agent sees")
    _require(isinstance(record["truncated"], bool), rule, "truncated must be a bool")
    _require(isinstance(record["latency_ms"], (int, float)), rule, "latency_ms must be a number")


def check_step_result(env: gym.Env, result: Any, before: Mapping[str, Any]) -> Step:
    """Step rules that hold whatever the action was: the 5-tuple, observation and info, the reward, each call
    record, the counters advanced (by the records made), and the terminal keys."""
    _require(isinstance(result, tuple) and len(result) == 5, "step result", "must be a 5-tuple")
    observation, reward, terminated, truncated, info = result
    where = f"step {info.get('turn') if isinstance(info, Mapping) else '?'}"
    check_observation(env, observation, where)
    check_info(info, where)
    _require(
        isinstance(reward, float) and 0.0 <= reward <= 1.0, "reward", f"must be a float in [0, 1]: {reward!r}"
    )
    _require(
        isinstance(terminated, bool) and isinstance(truncated, bool), "step result", "flags must be bools"
    )
    for record in info["calls"]:
        check_call_record(record, where)
    _require(info["turn"] == before["turn"] + 1, "info keys", f"turn must count steps: {info['turn']!r}")
    if terminated:
        missing = [key for key in TERMINAL_INFO_KEYS if key not in info]
        _require(not missing, "terminal info keys", f"missing {missing}")
        _require(isinstance(info["correct"], bool), "terminal info keys", "correct must be a bool")
        metrics = info["metrics"]
        _require(isinstance(metrics, Mapping), "terminal info keys", "metrics must be a dict ({} if none)")
        _require(
            all(v is None or isinstance(v, (int, float)) for k, v in metrics.items() if k != "counts"),
            "terminal info keys",
            "metrics values must be numbers or None (summaries average them); integer counts go under counts",
        )
    return observation, reward, terminated, truncated, info


def check_step(
    env: gym.Env, result: Any, calls_sent: list[dict[str, Any]], before: Mapping[str, Any]
) -> Step:
    """Step rule: :func:`check_step_result`, and for a standard turn one record per call sent (same ids),
    ``num_calls`` counting them, each shown as its tool message."""
    observation, reward, terminated, truncated, info = check_step_result(env, result, before)
    records = info["calls"]
    _require(
        len(records) == len(calls_sent),
        "call records",
        f"{len(calls_sent)} calls sent, {len(records)} recorded",
    )
    for record, call in zip(records, calls_sent, strict=True):
        _require(
            record["id"] == call["id"],
            "call records",
            f"id {record['id']!r} is not the call's {call['id']!r}",
        )
    _require(
        info["num_calls"] == before["num_calls"] + len(calls_sent),
        "info keys",
        f"num_calls must count calls: {before['num_calls']} + {len(calls_sent)} != {info['num_calls']}",
    )
    if records and not terminated:
        shown = observation["messages"][-len(records) :]
        for record, message in zip(records, shown, strict=True):
            _require(
                message.get("role") == "tool" and message.get("tool_call_id") == record["id"],
                "tool messages",
                f"each executed-turn record needs its tool message; got {message.get('role')!r}",
            )
            _require(
                message["content"] == record["feedback"], "tool messages", "content must be the feedback"
            )
    return observation, reward, terminated, truncated, info


def _probe_calls(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two calls every env must refuse and record: an unknown tool, and unparseable arguments."""
    first = tools[0]["function"]["name"]
    return [
        {"id": "check_1", "type": "function", "function": {"name": UNKNOWN_TOOL, "arguments": "{}"}},
        {"id": "check_2", "type": "function", "function": {"name": first, "arguments": "{not json"}},
    ]


def check_reset_result(env: gym.Env, result: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rules of what a reset returns: observation, info, no calls and turn 0."""
    _require(isinstance(result, tuple) and len(result) == 2, "reset result", "must be (observation, info)")
    observation, info = result
    check_observation(env, observation, "reset")
    check_info(info, "reset")
    _require(info["calls"] == [] and info["turn"] == 0, "info keys (reset)", "a reset has no calls, turn 0")
    return observation, info


def check_reset(env: gym.Env) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reset rule: ``options={"index"}`` and ``{"task_id"}`` name the same task; unknown options raise."""
    observation, info = check_reset_result(env, env.reset(options={"index": 0}))
    try:
        env.reset(options={"check_chat_env": 0})
    except ConfigError:
        pass
    else:
        raise ContractError("reset options: an unknown option must raise ConfigError (docs/contracts.md)")
    observation, again = env.reset(options={"task_id": info["task_id"]})
    _require(again["task_id"] == info["task_id"], "reset options", "task_id must name the task index named")
    return observation, again


def check_chat_env(env: gym.Env) -> None:
    """Raise :class:`ContractError` unless one short episode of ``env`` keeps docs/contracts.md.

    Refused calls (an unknown tool, bad JSON) get records with their statuses, a final answer ends the
    episode with ``correct``/``answer``, earlier observations stay unchanged, and a step after the end raises.
    """
    observation, info = check_reset(env)
    kept, kept_copy = observation, copy.deepcopy(observation)
    calls = _probe_calls(observation["tools"]) if observation["tools"] else []
    action: Any = {"role": "assistant", "content": None, "tool_calls": calls} if calls else FINAL_ANSWER
    _, _, terminated, truncated, info = check_step(env, env.step(action), calls, info)
    if calls:
        errors = [record["errors"] for record in info["calls"]]
        _require(
            "tool_hallucination" in errors[0] and "invalid_arguments" in errors[1],
            "call statuses",
            f"an unknown tool and unparseable arguments are tool_hallucination, invalid_arguments: {errors}",
        )
    if not (terminated or truncated):
        _, _, terminated, truncated, info = check_step(env, env.step(FINAL_ANSWER), [], info)
        _require(terminated, "termination", "an assistant message without tool calls must end the episode")
    _require(kept == kept_copy, "observation", "an observation returned earlier changed during the episode")
    try:
        env.step(FINAL_ANSWER)
    except HopgymError:
        pass
    else:
        raise ContractError("termination: step() after the episode ended must raise (docs/contracts.md)")


class ContractChecker(gym.Wrapper[dict[str, Any], Any, dict[str, Any], Any]):
    """The contract's cheap rules on an env's first reset and first step, at run time (Gymnasium's
    ``PassiveEnvChecker``): a third-party env, or a task file whose tools misbehave, fails with
    :class:`ContractError` naming the env id and the rule, not as odd records or summaries later. An env
    that broke a rule raises that error on every later reset and step (its episodes fail, none is recorded
    as played); one that kept them passes through unchecked after its first step."""

    def __init__(self, env: gym.Env, env_id: str) -> None:
        super().__init__(env)
        self.env_id = env_id
        self._before: Mapping[str, Any] | None = None
        """The info of the latest reset, until the first step is checked against it; then None."""
        self._checked_reset = False
        self._broken: str | None = None
        """The message of the rule the env broke, if it broke one."""

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        self._refuse_if_broken()
        result = self.env.reset(**kwargs)
        if not self._checked_reset:
            self._checked_reset = True
            self._check(check_reset_result, result)
            self._before = result[1]
        elif self._before is not None:
            self._before = result[1]
        return result

    def step(self, action: Any) -> Step:
        self._refuse_if_broken()
        result = self.env.step(action)
        if self._before is not None:
            before, self._before = self._before, None
            self._check(check_step_result, result, before)
        return result  # type: ignore[return-value]

    def _check(self, check: Callable[..., Any], result: Any, *args: Any) -> None:
        """``check(env, result, ...)``; a broken rule is kept and raised naming this env's id."""
        try:
            check(self.env, result, *args)
        except ContractError as exc:
            self._broken = (
                f"env {self.env_id} breaks the env contract, {exc}; {DISABLE_ENV_CHECKER}=true (Gymnasium's "
                "opt-out) skips these run-time checks"
            )
            raise ContractError(self._broken) from None

    def _refuse_if_broken(self) -> None:
        if self._broken is not None:
            raise ContractError(self._broken)
