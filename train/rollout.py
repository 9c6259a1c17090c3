"""TRL's ``rollout_func`` with hopgym running the turns: every completion is one env episode.

TRL's own tool loop (``tools=`` / ``environment_factory``) calls Python methods, one global tool list per
run (per-sample tools are an open pull request), and judges calls itself. ToolHop offers each query its
own tools, and a hopgym reward must come from the env's own validation, sandbox and scoring, so here the
env runs each turn: the completion's reply is parsed with TRL's parser for the chat template
(``parse_response``), sent to ``env.step`` as an assistant message (its calls validated, classified and
run in the sandbox; a reply without a call is the final answer), and the env's new ``tool`` messages are
appended as tokens the model did not write (``env_mask`` 0, no loss on them). Turns go on until the env
ends the episode (its answer rule, its ``max_turns``) or the completion's token budget is spent.

Generation is the trainer's own (``_generate_single_turn``: ``transformers`` on CPU, vLLM when
``use_vllm`` is set), batched over the episodes still running; the tool-result tokens come from TRL's own
``_get_tool_suffix_ids``. Both are private methods of the pinned TRL (``pyproject.toml``'s ``train``
extra); the tests run them.

Each completion's :class:`EpisodeRecord` (the env's ``info`` per turn: call records with their statuses,
reward, termination, metrics) is returned as the ``hopgym`` field, which TRL hands to the reward functions
(:mod:`hopgym.train.rewards`), so every reward is computed from what the env reported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypedDict

import gymnasium as gym

from hopgym.envs.calls import CallRecord
from hopgym.errors import ActionError, ConfigError
from hopgym.train.dataset import task_of_prompt

RECORD_FIELD = "hopgym"
"""The rollout output field (and so the reward functions' keyword) holding the episode records."""
CALL_MARKER = "<tool_call>"
"""Text that shows a reply tried to call a tool (the ChatML / Qwen2.5 / Hermes call format)."""


class TurnRecord(TypedDict):
    """One assistant turn as the env saw it."""

    text: str
    """The reply the model wrote, decoded."""
    action: dict[str, Any] | str
    """What was sent to ``env.step``: an assistant message, or the text as a final answer."""
    well_formed: bool
    """The reply ended (end-of-turn token, not the token budget) and is either tool calls that parsed or a
    plain answer with no attempted call in it."""
    calls: list[CallRecord]
    """``info["calls"]`` of the step: each call's status, errors, feedback."""
    reward: float
    terminated: bool
    truncated: bool


class EpisodeRecord(TypedDict):
    """One completion's episode: its task, turns, and how the env ended (or did not end) it."""

    task_id: str
    turns: list[TurnRecord]
    reward: float
    """The env's reward of the episode: its final step's; 0.0 when the episode did not end."""
    ended: bool
    """The env ended the episode (terminated or truncated); False when the token budget ran out first."""
    correct: bool | None
    """``info["correct"]`` of the final step; None when the episode did not end terminated."""
    metrics: dict[str, Any] | None
    env_seconds: float
    """Wall time spent in ``env.reset`` and ``env.step`` (sandboxed calls included)."""


class EnvPool:
    """Envs for the episodes of one generation batch, made on demand and reused across batches (an env
    holds one episode at a time, and each keeps its own sandbox workers ready)."""

    def __init__(self, make_env: Callable[[], gym.Env]) -> None:
        self._make_env = make_env
        self.envs: list[gym.Env] = []

    def take(self, count: int) -> list[gym.Env]:
        while len(self.envs) < count:
            self.envs.append(self._make_env())
        return self.envs[:count]

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


class _Episode:
    """A running episode: its env, token ids so far and its record."""

    def __init__(self, env: gym.Env, task_id: str) -> None:
        self.env = env
        started = time.perf_counter()
        observation, _ = env.reset(options={"task_id": task_id})
        self.messages: list[dict[str, Any]] = list(observation["messages"])
        self.tools: list[dict[str, Any]] = list(observation["tools"])
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.logprobs: list[float] = []
        self.record: EpisodeRecord = {
            "task_id": task_id,
            "turns": [],
            "reward": 0.0,
            "ended": False,
            "correct": None,
            "metrics": None,
            "env_seconds": time.perf_counter() - started,
        }

    def step(self, action: dict[str, Any] | str, text: str, well_formed: bool) -> list[dict[str, Any]]:
        """Send the turn to the env; return the messages the env added after the assistant message."""
        started = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = self.env.step(action)
        except ActionError:  # parsed into no valid action: the reply is a plain-text final answer
            action, well_formed = text, False
            observation, reward, terminated, truncated, info = self.env.step(action)
        self.record["env_seconds"] += time.perf_counter() - started
        self.record["turns"].append(
            {
                "text": text,
                "action": action,
                "well_formed": well_formed,
                "calls": list(info["calls"]),
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
            }
        )
        added = list(observation["messages"])[len(self.messages) + 1 :]
        self.messages = list(observation["messages"])
        if terminated or truncated:
            self.record["reward"] = float(reward)
            self.record["ended"] = True
            self.record["correct"] = bool(info["correct"]) if "correct" in info else None
            self.record["metrics"] = info.get("metrics")
        return added


def tool_suffix_messages(
    added: Sequence[Mapping[str, Any]], calls: Sequence[CallRecord]
) -> list[dict[str, Any]]:
    """The env's new messages, as the chat template's tool turn renders them (each with its tool's name,
    which ToolHop's official protocol leaves out, as the official code does)."""
    if any(message.get("role") != "tool" for message in added):
        roles = sorted({str(message.get("role")) for message in added})
        raise ConfigError(
            f"the env answered a turn with {roles} messages; the rollout renders tool results only"
        )
    names = [str(call["name"]) for call in calls]
    return [
        {**message, "name": message.get("name") or (names[i] if i < len(names) else "tool")}
        for i, message in enumerate(added)
    ]


@contextlib.contextmanager
def _new_tokens(trainer: Any, count: int) -> Iterator[None]:
    """Let the trainer's ``transformers`` generation write at most ``count`` tokens (later turns have less
    of the budget left; vLLM's requests keep their own limit and are cut below)."""
    config = getattr(trainer, "generation_config", None)
    if config is None or getattr(trainer, "use_vllm", False):
        yield
        return
    kept = config.max_new_tokens
    config.max_new_tokens = count
    try:
        yield
    finally:
        config.max_new_tokens = kept


class HopgymRollout:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: each prompt (a row of
    :func:`hopgym.train.dataset.task_dataset`, repeated once per generation by TRL's sampler) becomes one
    episode of an env made by ``make_env``. ``on_rollout`` receives each batch's records and the seconds
    spent generating (the step log and the benchmark read them)."""

    def __init__(
        self,
        make_env: Callable[[], gym.Env],
        tokenizer: Any,
        on_rollout: Callable[[list[EpisodeRecord], float], None] | None = None,
    ) -> None:
        self.pool = EnvPool(make_env)
        self.tokenizer = tokenizer
        self.on_rollout = on_rollout
        self.__name__ = type(self).__name__

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        from trl.chat_template_utils import parse_response

        task_ids = [task_of_prompt(prompt) for prompt in prompts]
        envs = self.pool.take(len(prompts))
        episodes = [_Episode(env, task_id) for env, task_id in zip(envs, task_ids, strict=True)]
        prompt_ids = [self._prompt_ids(episode) for episode in episodes]
        budget = trainer.max_completion_length
        running = list(range(len(episodes)))
        generation_seconds = 0.0
        scored = True  # the generation reported its logprobs (vLLM does; transformers' path does not)
        while running:
            inputs = [prompt_ids[i] + episodes[i].completion_ids for i in running]
            left = max(budget - len(episodes[i].completion_ids) for i in running)
            started = time.perf_counter()
            with _new_tokens(trainer, left):
                new_ids, new_logprobs = trainer._generate_single_turn(inputs, None, {}, 1)
            generation_seconds += time.perf_counter() - started
            scored = scored and new_logprobs is not None
            still_running = []
            for position, i in enumerate(running):
                episode = episodes[i]
                ids = list(new_ids[position])[: budget - len(episode.completion_ids)]
                episode.completion_ids += ids
                episode.env_mask += [1] * len(ids)
                if new_logprobs is not None:
                    episode.logprobs += list(new_logprobs[position][: len(ids)])
                tools = episode.tools or None
                message = parse_response(self.tokenizer, ids, prefix=inputs[position], tools=tools)
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                action, well_formed = self._action(message, text, finished=self._ends_turn(ids))
                added = episode.step(action, text, well_formed)
                if episode.record["ended"]:
                    continue
                suffix = trainer._get_tool_suffix_ids(
                    tool_suffix_messages(added, episode.record["turns"][-1]["calls"])
                )
                if len(episode.completion_ids) + len(suffix) >= budget:
                    continue  # no room to answer: the episode stays unended (reward 0.0)
                episode.completion_ids += suffix
                episode.env_mask += [0] * len(suffix)
                episode.logprobs += [0.0] * len(suffix)
                still_running.append(i)
            running = still_running
        records = [episode.record for episode in episodes]
        if self.on_rollout is not None:
            self.on_rollout(records, generation_seconds)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [episode.completion_ids for episode in episodes],
            "logprobs": [episode.logprobs for episode in episodes] if scored else None,
            "env_mask": [episode.env_mask for episode in episodes],
            RECORD_FIELD: records,
        }

    def _prompt_ids(self, episode: _Episode) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            episode.messages,
            tools=episode.tools or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)

    def _ends_turn(self, ids: Sequence[int]) -> bool:
        return bool(ids) and ids[-1] == self.tokenizer.eos_token_id

    @staticmethod
    def _action(message: Mapping[str, Any], text: str, finished: bool) -> tuple[dict[str, Any] | str, bool]:
        """The env action of a parsed reply and whether the reply was well formed (see
        :class:`TurnRecord`)."""
        calls = message.get("tool_calls") or []
        if calls:
            return {
                "role": "assistant",
                "content": message.get("content") or "",
                "tool_calls": calls,
            }, finished
        content = str(message.get("content") or "")
        return content, finished and CALL_MARKER not in content and bool(content.strip())

    def close(self) -> None:
        self.pool.close()
