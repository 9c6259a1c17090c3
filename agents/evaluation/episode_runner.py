"""Episodes of an eval run, and where they run: :class:`EpisodeRunner` plays episodes in this process and
turns each into its :class:`EpisodeRecord`; an :class:`Executor` streams finished records back to the run
(:class:`LocalExecutor` here, the Ray executor of ``agents/evaluation/ray_executor.py`` on a cluster's
nodes, each node with its own runner). Neither writes the run folder: ``runner.EvalRun`` alone does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym

import hopgym  # noqa: F401 - registers the envs
from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.agents.evaluation.training_record import TrainingStage
from hopgym.agents.model.client import ModelClient, ModelConfig
from hopgym.agents.policies.base import Agent
from hopgym.agents.policies.registry import agent_factory
from hopgym.serving.rollouts import Rollout, Rollouts, RolloutsFactory


@dataclass(frozen=True)
class EvalConfig:
    """Everything one run needs; ``run_identity`` is what a resumed run must share with the original."""

    out: Path
    model: ModelConfig
    env_id: str = "ToolHop-v0"
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    agent: str = "fc"
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    concurrency: int = 8
    limit: int | None = None
    sample: int | None = None
    """Run a stratified sample of this many tasks (see :func:`stratified_sample`) instead of all."""
    task_ids: tuple[str, ...] = ()
    """Run only these tasks, in this order, instead of all."""
    seed: int = 0
    """Seeds the stratified sample and, plus the sample number, each episode's reset."""
    samples: int = 1
    """Episodes per task."""
    resume: bool = False
    retry_errors: bool = False
    """With ``resume``: run again the episodes whose record holds an ``error`` (their records are dropped
    first), e.g. after the model server was down or misconfigured for part of a run."""
    progress: bool = True
    executor: str = "local"
    """``local`` (this process) or ``ray`` (a Ray cluster's nodes, ``concurrency`` episodes each)."""
    ray_address: str | None = None
    make_rollouts: RolloutsFactory = field(default=Rollouts, repr=False)
    """Where the episodes' envs are: :class:`Rollouts` (where the executor runs them), or env servers
    (``hopgym.serving.remote_rollouts.on_servers``). Not part of the run's identity."""
    training: tuple[TrainingStage, ...] = ()
    """What the model was trained on (its folder's ``training-tasks.json``): evaluated tasks among them are
    named in a warning. Not part of the run's identity."""

    def run_identity(self) -> dict[str, Any]:
        """Settings a resumed run must share; the newer ones appear only when set, so a run folder made
        before they existed still resumes."""
        optional = {
            "sample": self.sample,
            "task_ids": list(self.task_ids) or None,
            "seed": self.seed or None,
            "samples": self.samples if self.samples != 1 else None,
            "model_extra": dict(self.model.extra) or None,
        }
        return {
            "env": self.env_id,
            "env_kwargs": dict(self.env_kwargs),
            "agent": self.agent,
            "agent_options": dict(self.agent_options),
            "model": self.model.model,
            "temperature": self.model.temperature,
            "max_tokens": self.model.max_tokens,
            "tool_choice_substitutes": dict(self.model.tool_choice_substitutes),
            **{key: value for key, value in optional.items() if value is not None},
        }


def sample_model(model: ModelConfig, sample: int) -> ModelConfig:
    """The model config of sample ``sample``: its ``seed`` (when it has one) moved on by the sample."""
    seed = model.extra.get("seed")
    if sample == 0 or not isinstance(seed, int):
        return model
    return replace(model, extra={**model.extra, "seed": seed + sample})


class EpisodeRunner:
    """Runs episodes in this process, up to ``concurrency`` at once, through ``config.make_rollouts`` (one
    env pool, or env servers). The local executor has one; the Ray executor one per node."""

    def __init__(self, config: EvalConfig, concurrency: int) -> None:
        self.config = config
        clients: dict[Any, ModelClient] = {}  # one client per distinct model seed
        self._make_agent: list[Callable[[], Agent]] = []
        for sample in range(config.samples):
            model = sample_model(config.model, sample)
            seed = model.extra.get("seed")
            if seed not in clients:
                clients[seed] = ModelClient(model)
            self._make_agent.append(agent_factory(config.agent, clients[seed], config.agent_options))
        self.rollouts = config.make_rollouts(config.env_id, config.env_kwargs, concurrency)

    def make_env(self) -> gym.Env:
        return self.rollouts.make_env()

    async def start(self, size: int, first_env: gym.Env | None = None) -> None:
        """Make the pool of ``size`` envs (``first_env`` among them, if given) before the first episode."""
        await self.rollouts.start(size, first_env)

    async def close(self) -> None:
        """Wait for the env threads, then close every env; the runner runs no episode after this."""
        await self.rollouts.close()

    def shutdown(self) -> None:
        """Stop the env threads (waiting for those still running)."""
        self.rollouts.shutdown()

    async def episode(self, index: int, task_id: str, sample: int) -> EpisodeRecord:
        """Run one episode to its end and return its record; any exception ends only this episode,
        recorded as its ``error`` (cancellation, e.g. Ctrl-C, still stops the run)."""
        seed = self.config.seed + sample
        agent: Agent | None = None
        try:
            agent = self._make_agent[sample]()
        except Exception as exc:
            rollout = Rollout()
            rollout.fail(exc)
        else:
            rollout = await self.rollouts.episode(agent.act, {"index": index}, seed)
        stats = agent.stats.as_dict() if agent is not None else None
        return episode_record(rollout, task_id, index, sample, seed, stats)


def episode_record(
    rollout: Rollout, task_id: str, index: int, sample: int, seed: int | None, agent: dict[str, Any] | None
) -> EpisodeRecord:
    """The record of a played episode: one definition for ``hopgym eval`` and the outside harnesses that
    play hopgym's episodes (hopgym.inspect), so their columns are computed from the same fields."""
    info, outcome = rollout.info, rollout.outcome
    messages = list(rollout.observation.get("messages", ()))
    final = messages[-1] if outcome.terminated and messages else None
    return EpisodeRecord(
        task_id=task_id,
        index=index,
        sample=sample,
        seed=seed,
        reward=outcome.reward,
        correct=outcome.correct,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        turns=rollout.turns,
        calls=rollout.calls,
        parallel_turns=rollout.parallel_turns,
        final_answer=final.get("content") if final else None,
        gold_answer=info.get("answer"),
        hops=info.get("hops"),
        isolation=info.get("isolation"),
        metrics=None if outcome.metrics is None else dict(outcome.metrics),
        agent=agent,
        latency_ms=rollout.latency_ms,
        error=rollout.error,
        error_detail=rollout.error_detail,
        messages=messages,
        server=rollout.server,
    )


Episode = tuple[int, str, int]
"""(task index, task id, sample): one episode of a run."""


class Executor(Protocol):
    """Runs the pending episodes somewhere and yields each finished record once, in finishing order."""

    def stream(self, pending: Sequence[Episode]) -> AsyncGenerator[EpisodeRecord, None]: ...


class LocalExecutor:
    """Every episode in this process, ``concurrency`` at once (the first env, already made, is reused)."""

    def __init__(self, runner: EpisodeRunner, first_env: gym.Env) -> None:
        self._runner = runner
        self._first_env = first_env

    async def stream(self, pending: Sequence[Episode]) -> AsyncGenerator[EpisodeRecord, None]:
        runner = self._runner
        episodes: list[asyncio.Future[EpisodeRecord]] = []
        try:
            await runner.start(min(runner.config.concurrency, len(pending)), self._first_env)
            episodes = [asyncio.ensure_future(runner.episode(*episode)) for episode in pending]
            for finished in asyncio.as_completed(episodes):
                yield await finished
        finally:
            for episode in episodes:  # after a crash, episodes still running must not outlive the run
                episode.cancel()
            await asyncio.gather(*episodes, return_exceptions=True)
            await runner.close()
