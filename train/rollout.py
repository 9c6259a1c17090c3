"""TRL's ``rollout_func`` with hopgym running the turns: every completion is one env episode.

TRL's own tool loop (``tools=`` / ``environment_factory``) calls Python methods, one global tool list per
run (per-sample tools are an open pull request), and judges calls itself. ToolHop offers each query its
own tools, and a hopgym reward must come from the env's own validation, sandbox and scoring, so here the
env runs each turn: the episodes are played by :class:`~hopgym.serving.rollouts.Rollouts` (the
one episode loop, envs in worker threads), with a policy that asks the trainer for the reply. The reply
is parsed with TRL's parser for the chat template (``parse_response``, within hopgym's bounds for model
text: :mod:`hopgym.agents.model.reply_parser`), then for calls written as JSON in its text, as the ``fc``
agent reads a checkpoint's reply in evaluation (a reply that makes no action is malformed, its text the
final answer), and sent to ``env.step`` as an assistant message (its calls validated, classified and run in
the sandbox; a reply without a call is the final answer); the env's new ``tool`` messages are appended as
tokens the model did not write (``env_mask`` 0, no loss on them). Turns go on until the env ends the episode
(its answer rule, its ``max_turns``) or the completion's token budget is spent.

The protocol is the ``fc`` agent's: native tool calls, answered by ``tool`` messages. An env that is not
one of hopgym's chat envs is refused when the rollout is made (CodeAct's code actions, whose output comes
back as a ``user`` message, are never sent: the model's reply is parsed as tool calls only).

Generation is the trainer's own (``_generate_single_turn``: ``transformers`` on CPU, vLLM when
``use_vllm`` is set), batched over the episodes still running: a turn's generation starts once every
unfinished episode asks for its reply. The tool-result tokens come from TRL's own
``_get_tool_suffix_ids``. Both are private methods of the pinned TRL (``pyproject.toml``'s ``train``
extra); the tests run them.

Each completion's :class:`TrainEpisode` (the env's ``info`` per turn: call records with their statuses,
reward, termination, metrics) is returned as the ``hopgym`` field, which TRL hands to the reward functions
(:mod:`hopgym.train.rewards`), so every reward is computed from what the env reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypedDict

import gymnasium as gym

from hopgym.agents.model.reply_parser import parse_reply
from hopgym.agents.policies.text_calls import with_text_calls
from hopgym.envs.calls import CallRecord
from hopgym.envs.chat import STANDARD_TURN, chat_env, checked_action
from hopgym.envs.outcome import NOT_ENDED, Outcome, OutcomeFields
from hopgym.errors import ActionError, ConfigError, HopgymError, ModelError
from hopgym.serving.rollouts import Rollout, Rollouts
from hopgym.serving.task_rows import task_of_prompt

RECORD_FIELD = "hopgym"
"""The rollout output field (and so the reward functions' keyword) holding the episode records."""
CALL_MARKER = "<tool_call>"
"""Text that shows a reply tried to call a tool (the ChatML / Qwen2.5 / Hermes call format)."""
CALL_EXAMPLE = "\n\nFor example, to call {name}, reply with only:\n<tool_call>\n{call}\n</tool_call>"
"""The one-shot call shown with ``call_example`` (the chat template's tool list states the format only)."""
PROTOCOL = "native tool calls (the fc agent: <tool_call> blocks in the reply, tool messages back)"
"""What the rollout plays, as its refusals name it."""


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
    """The step's reward: the env's reward on the turn that ended the episode, 0.0 before (the contract)."""
    terminated: bool
    truncated: bool


class TrainEpisode(OutcomeFields):
    """One completion's episode: its task, turns, and how the env ended (or did not end) it: the fields of
    its :class:`~hopgym.envs.outcome.Outcome` (``reward``, ``terminated``, ``truncated``, ``ended``: False
    when the token budget ran out first, ``correct``: False unless it terminated correct, ``metrics``), read
    back with ``Outcome.of_fields``."""

    task_id: str
    turns: list[TurnRecord]
    env_seconds: float
    """Wall time spent in ``env.reset`` and ``env.step`` (sandboxed calls included)."""
    server: str | None
    """The env server that played the episode (``--env-url``); None: in process."""
    cut_off: list[str]
    """Env servers that died or refused while they had the episode (``URL: why``): it was played again
    from its start on another, and only that play counts."""


def unended_episode(task_id: str) -> TrainEpisode:
    """The record of an episode of ``task_id`` before its first turn: nothing played, nothing ended."""
    return {
        "task_id": task_id,
        "turns": [],
        **NOT_ENDED.fields(),
        "env_seconds": 0.0,
        "server": None,
        "cut_off": [],
    }


def record_outcome(record: TrainEpisode, outcome: Outcome) -> None:
    """Put the episode's outcome into its record (the training record's one way to say how it ended)."""
    record.update(outcome.fields())


class _OutOfTokens(ModelError):
    """The completion's token budget cannot hold the env's reply and an answer: the episode stops unended
    (a model error to :class:`Rollouts`, which keeps the env)."""


def check_env(env: gym.Env, env_id: str) -> None:
    """Refuse, before any training, an env the rollout cannot play (see the module docstring)."""
    try:
        inner = chat_env(env)
    except ConfigError as exc:
        raise ConfigError(f"hopgym train plays {PROTOCOL} on hopgym's chat envs; {env_id}: {exc}") from None
    if inner.first_turn != STANDARD_TURN:
        raise ConfigError(
            f"hopgym train plays {PROTOCOL}; {env_id} with these env kwargs reads its first turn as "
            f"{inner.first_turn!r}, its own turn that may rewrite the episode's messages, which a completion "
            f"cannot hold: use env kwargs whose first turn is {STANDARD_TURN!r}"
        )


def with_call_example(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with a call of the first offered tool written out in the system message (a new one when
    there is none): a 135M model rarely writes a ``<tool_call>`` block from the format's description alone,
    and an episode without a call earns GRPO no call reward to learn from."""
    copied = [dict(message) for message in messages]
    if not tools:
        return copied
    function = tools[0]["function"]
    required = (function.get("parameters") or {}).get("required") or []
    call = json.dumps({"name": function["name"], "arguments": {name: f"<{name}>" for name in required}})
    example = CALL_EXAMPLE.format(name=function["name"], call=call)
    if copied and copied[0].get("role") == "system":
        copied[0]["content"] = str(copied[0].get("content") or "") + example
    else:
        copied.insert(0, {"role": "system", "content": example.strip()})
    return copied


def tool_suffix_messages(
    added: Sequence[Mapping[str, Any]], calls: Sequence[CallRecord]
) -> list[dict[str, Any]]:
    """The env's new messages, as the chat template's tool turn renders them (each with its tool's name,
    which ToolHop's official protocol leaves out, as the official code does)."""
    if any(message.get("role") != "tool" for message in added):
        roles = sorted({str(message.get("role")) for message in added})
        raise HopgymError(f"the env answered tool calls with {roles} messages, not tool messages only")
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


Reply = tuple[list[int], list[float] | None]
"""A generated reply's token ids and, when the generation reports them, their logprobs."""


class _Batch:
    """The generation of one rollout call: each episode asks for its next reply; once every unfinished
    episode asks, one trainer call answers them all."""

    def __init__(self, trainer: Any, episodes: int) -> None:
        self.trainer = trainer
        self.unfinished = episodes
        self.waiting: list[tuple[int, list[int], int, asyncio.Future[Reply]]] = []
        self.seconds = 0.0
        self.scored = True
        """Every generation reported its logprobs (vLLM does; transformers' path does not)."""
        self.failure: BaseException | None = None

    async def reply(self, position: int, ids: list[int], left: int) -> Reply:
        """The next reply's token ids (at most ``left``) and their logprobs, for the prompt ``ids`` of the
        episode at ``position`` (a batch is generated in episode order, whichever env answered first)."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.waiting.append((position, ids, left, future))
        self._generate_if_all_wait()
        return await future

    def finished(self) -> None:
        self.unfinished -= 1
        self._generate_if_all_wait()

    def _generate_if_all_wait(self) -> None:
        if not self.waiting or len(self.waiting) < self.unfinished:
            return
        waiting, self.waiting = sorted(self.waiting, key=lambda entry: entry[0]), []
        started = time.perf_counter()
        try:
            with _new_tokens(self.trainer, max(left for _, _, left, _ in waiting)):
                prompts = [ids for _, ids, _, _ in waiting]
                new_ids, logprobs = self.trainer._generate_single_turn(prompts, None, {}, 1)
        except Exception as exc:
            self.failure = exc
            for *_, future in waiting:
                future.set_exception(exc)
            return
        finally:
            self.seconds += time.perf_counter() - started
        self.scored = self.scored and logprobs is not None
        for row, (_, _, left, future) in enumerate(waiting):
            ids = list(new_ids[row])[:left]
            future.set_result((ids, None if logprobs is None else list(logprobs[row][: len(ids)])))


class _Episode:
    """One completion: the policy :class:`Rollouts` plays its episode with, its token ids so far and its
    record."""

    def __init__(
        self, rollout: HopgymRollout, batch: _Batch, position: int, task_id: str, budget: int
    ) -> None:
        self.rollout = rollout
        self.position = position
        self.batch = batch
        self.budget = budget
        self.prompt_ids: list[int] = []
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.logprobs: list[float] = []
        self.tools: list[dict[str, Any]] = []
        self.seen = 0
        """Messages of the conversation before the last action."""
        self.out_of_tokens = False
        self.pending: tuple[str, dict[str, Any] | str, bool] | None = None
        """The last turn sent to the env: text, action, well formed."""
        self.policy_seconds = 0.0
        self.record = unended_episode(task_id)

    async def __call__(self, observation: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any] | str:
        started = time.perf_counter()
        try:
            return await self._act(observation, info)
        finally:
            self.policy_seconds += time.perf_counter() - started

    async def _act(self, observation: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any] | str:
        messages = list(observation["messages"])
        if self.pending is None:
            self.tools = list(observation["tools"])
            self.prompt_ids = self.rollout.prompt_ids(messages, self.tools)
        else:
            if len(messages) <= self.seen or messages[self.seen].get("role") != "assistant":
                raise HopgymError("the env rewrote the chat after a reply instead of answering it")
            calls = self._turn_ended(info, 0.0, False, False)
            added = tool_suffix_messages(messages[self.seen + 1 :], calls)
            suffix = list(self.batch.trainer._get_tool_suffix_ids(added))
            if len(self.completion_ids) + len(suffix) >= self.budget:
                self.out_of_tokens = True
                raise _OutOfTokens("no room left in the completion for the env's reply and an answer")
            self._add(suffix, [0.0] * len(suffix), written=False)
        self.seen = len(messages)
        prefix = self.prompt_ids + self.completion_ids
        ids, logprobs = await self.batch.reply(self.position, prefix, self.budget - len(self.completion_ids))
        self._add(ids, logprobs or [0.0] * len(ids), written=True)
        self.pending = self.rollout.action(ids, prefix, self.tools)
        return self.pending[1]

    def _add(self, ids: list[int], logprobs: list[float], written: bool) -> None:
        self.completion_ids += ids
        self.env_mask += [int(written)] * len(ids)
        self.logprobs += logprobs

    def _turn_ended(
        self, info: Mapping[str, Any], reward: float, terminated: bool, truncated: bool
    ) -> list[CallRecord]:
        assert self.pending is not None
        text, action, well_formed = self.pending
        calls = list(info.get("calls") or [])
        self.record["turns"].append(
            {
                "text": text,
                "action": action,
                "well_formed": well_formed,
                "calls": calls,
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
            }
        )
        return calls

    def finish(self, played: Rollout) -> None:
        """Fill the record from the played episode (its last step's ``info``, reward and ending)."""
        if played.error is not None and not self.out_of_tokens:
            raise HopgymError(f"episode of {self.record['task_id']} failed: {played.error}")
        outcome = played.outcome
        if outcome.ended:
            self._turn_ended(played.info, outcome.reward, outcome.terminated, outcome.truncated)
            record_outcome(self.record, outcome)
        self.record["env_seconds"] = max(0.0, played.latency_ms / 1000 - self.policy_seconds)
        self.record["server"], self.record["cut_off"] = played.server, list(played.cut_off)


class HopgymRollout:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``: each prompt (a row of
    :func:`hopgym.train.dataset.task_dataset`, repeated once per generation by TRL's sampler) becomes one
    episode played by ``rollouts`` (whose ``concurrency`` must hold a whole generation batch: every episode
    of a turn is generated at once). ``first_env`` (one already made for the dataset) joins its pool.
    ``on_rollout`` receives each batch's records and the seconds spent generating (the step log and the
    benchmark read them)."""

    def __init__(
        self,
        rollouts: Rollouts,
        tokenizer: Any,
        on_rollout: Callable[[list[TrainEpisode], float], None] | None = None,
        first_env: gym.Env | None = None,
        call_example: bool = False,
    ) -> None:
        self.rollouts = rollouts
        self.call_example = call_example
        self.tokenizer = tokenizer
        self.on_rollout = on_rollout
        self.__name__ = type(self).__name__
        self._loop = asyncio.new_event_loop()
        first = first_env if first_env is not None else rollouts.make_env()
        try:
            check_env(first, rollouts.env_id)
        except ConfigError:
            if first_env is None:
                first.close()
            self._loop.close()
            raise
        self._loop.run_until_complete(rollouts.start(first_env=first))

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        if len(prompts) > self.rollouts.concurrency:
            raise ConfigError(
                f"a generation batch of {len(prompts)} episodes needs as many envs; the rollout has "
                f"{self.rollouts.concurrency} (Rollouts' concurrency)"
            )
        batch = _Batch(trainer, len(prompts))
        episodes = [
            _Episode(self, batch, i, task_of_prompt(prompt), trainer.max_completion_length)
            for i, prompt in enumerate(prompts)
        ]

        async def play(episode: _Episode) -> Rollout:
            try:
                return await self.rollouts.episode(episode, {"task_id": episode.record["task_id"]})
            finally:
                batch.finished()

        async def play_all() -> list[Rollout]:
            return list(await asyncio.gather(*(play(episode) for episode in episodes)))

        played = self._loop.run_until_complete(play_all())
        if batch.failure is not None:
            raise batch.failure
        for episode, result in zip(episodes, played, strict=True):
            episode.finish(result)
        records = [episode.record for episode in episodes]
        if self.on_rollout is not None:
            self.on_rollout(records, batch.seconds)
        return {
            "prompt_ids": [episode.prompt_ids for episode in episodes],
            "completion_ids": [episode.completion_ids for episode in episodes],
            "logprobs": [episode.logprobs for episode in episodes] if batch.scored else None,
            "env_mask": [episode.env_mask for episode in episodes],
            RECORD_FIELD: records,
        }

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """The prompt the model sees: the env's first messages (with a call example if asked) and tools."""
        shown = with_call_example(messages, tools) if self.call_example else messages
        ids = self.tokenizer.apply_chat_template(
            shown, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return list(ids)

    def action(
        self, ids: list[int], prefix: list[int], tools: list[dict[str, Any]]
    ) -> tuple[str, dict[str, Any] | str, bool]:
        """The decoded reply, the env action it makes and whether it was well formed (see
        :class:`TurnRecord`). It is read as ``hopgym eval`` reads a checkpoint's reply (the checkpoint
        server's parser, then the ``fc`` agent's): TRL's parser within hopgym's bounds
        (:func:`~hopgym.agents.model.reply_parser.parse_reply`; the decoded text when it cannot read it),
        then calls written as JSON in the content
        (:func:`~hopgym.agents.policies.text_calls.with_text_calls`), which are not well formed. A reply
        that makes no valid action is malformed: its text is the final answer."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        finished = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        parsed = parse_reply(self.tokenizer, ids, prefix, tools or None)
        native = parsed is not None and bool(parsed.get("tool_calls"))
        message = parsed if parsed is not None else {"role": "assistant", "content": text}
        if tools:
            message, _ = with_text_calls(message)
        calls = message.get("tool_calls") or []
        if calls:
            action = {"role": "assistant", "content": message.get("content") or "", "tool_calls": calls}
            try:
                return text, checked_action(action), finished and native
            except ActionError:
                return text, text, False
        if parsed is None:
            return text, text, False
        content = str(message.get("content") or "")
        return text, content, finished and CALL_MARKER not in content and bool(content.strip())

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self.rollouts.close())
        finally:
            self._loop.close()
