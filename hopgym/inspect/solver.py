"""The solver that plays an Inspect sample as one hopgym episode.

Each sample borrows an env of its task (:class:`TaskRollouts`, a :class:`Rollouts` made when the first
sample starts) and plays the task at its ``index``: Inspect's model answers each observation, and every
reply goes to the env's ``step``, so the sandbox runs each tool call and the statuses and feedback are the
env's own. The episode's record (:func:`episode_record`, as ``hopgym eval`` writes it) is kept in the
sample's store for the scorer; ``state.messages`` end as the env's whole conversation. The rollouts of a run
are closed when the run ends (:class:`CloseTaskRollouts`), with their envs and sandboxes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from inspect_ai.hooks import Hooks, RunEnd, hooks
from inspect_ai.model import GenerateConfig, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver

from hopgym.agents.evaluation.episode_runner import episode_record
from hopgym.errors import HopgymError, ModelError, error_text
from hopgym.inspect.messages import action_of, chat_message, tool_choice, tool_info
from hopgym.inspect.provider import NO_TOOL_CHOICE
from hopgym.serving.rollouts import Rollouts

EPISODE = "hopgym_episode"
"""The store key of the sample's episode record (its JSON, without the messages: those are the sample's)."""


class TaskRollouts:
    """The envs of one Inspect task: a :class:`Rollouts` of ``concurrency`` envs, made in the running event
    loop when the first sample asks, and made afresh by a later run after :meth:`close`."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], concurrency: int) -> None:
        self.env_id, self.env_kwargs, self.concurrency = env_id, dict(env_kwargs), concurrency
        self._rollouts: Rollouts | None = None
        self._started: asyncio.Future[None] | None = None

    async def rollouts(self) -> Rollouts:
        if self._rollouts is None:
            self._rollouts = Rollouts(self.env_id, self.env_kwargs, self.concurrency)
            self._started = asyncio.ensure_future(self._rollouts.start(prefill=False))
            _OPEN.add(self)
        assert self._started is not None
        await asyncio.shield(self._started)  # one start for every sample that waits for it
        return self._rollouts

    async def close(self) -> None:
        """Close every env (and sandbox) of the task; the next sample starts new rollouts."""
        rollouts, self._rollouts, self._started = self._rollouts, None, None
        _OPEN.discard(self)
        if rollouts is not None:
            await rollouts.close()


_OPEN: set[TaskRollouts] = set()
"""The tasks' rollouts with envs open in this process."""


@hooks(
    name="hopgym_task_rollouts", description="Closes hopgym's envs and sandboxes when an Inspect run ends."
)
class CloseTaskRollouts(Hooks):
    async def on_run_end(self, data: RunEnd) -> None:
        while _OPEN:
            await _OPEN.pop().close()


@solver
def play_episode(envs: TaskRollouts, seed: int = 0) -> Solver:
    """Play the sample's task (``metadata["index"]``) as a hopgym episode on one of ``envs``; epoch
    ``e`` resets with ``seed + e - 1``, as ``hopgym eval --seed`` resets its sample ``e - 1``. An error of
    Inspect's model (a limit reached, an API failure) ends the sample with that error; an episode the env
    could not play ends it with a :class:`~hopgym.errors.HopgymError` naming why."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        rollouts = await envs.rollouts()
        model = get_model()
        raised: list[BaseException] = []

        async def policy(observation: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
            state.messages = [chat_message(m) for m in observation["messages"]]
            tools = [tool_info(tool) for tool in observation["tools"]]
            choice = tool_choice(info.get("tool_choice")) if tools else None
            token = NO_TOOL_CHOICE.set(choice is None)
            try:
                state.output = await model.generate(
                    state.messages, tools=tools, tool_choice=choice, config=GenerateConfig()
                )
            except Exception as exc:  # the env is fine: it goes back to the pool (a ModelError)
                raised.append(exc)
                raise ModelError(error_text(exc)) from exc
            finally:
                NO_TOOL_CHOICE.reset(token)
            return action_of(state.output.message, bool(tools))

        index = int(state.metadata["index"])
        sample_seed = seed + state.epoch - 1
        rollout = await rollouts.episode(policy, {"index": index}, sample_seed)
        if raised:
            raise raised[0]
        record = episode_record(rollout, str(state.sample_id), index, state.epoch - 1, sample_seed, None)
        state.messages = [chat_message(m) for m in record.messages]
        if record.error is not None:
            raise HopgymError(f"the episode of task {record.task_id!r} failed: {record.error}")
        state.store.set(EPISODE, {**record.to_json(), "messages": []})
        return state

    return solve
