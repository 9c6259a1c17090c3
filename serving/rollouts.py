"""Batched rollouts in process: many episodes of one env at once, for a trainer that holds the envs itself.

A :class:`Rollouts` keeps a pool of envs of one id (each with its own sandbox, whose pre-started workers
are the warm pool), runs env resets and steps in worker threads so that a slow tool never blocks the
event loop, and plays episodes with any async policy ``(observation, info) -> action``: a hopgym agent's
``act``, or a trainer's sampler. ``hopgym eval``'s runner plays its episodes through it; this module holds
the only copy of the episode loop::

    async def policy(observation, info):
        return "Paris"  # or an assistant message with tool_calls

    async with Rollouts("ToolHop-v0", concurrency=8) as rollouts:
        results = await rollouts.run(policy, [{"index": i} for i in range(64)])
        rewards = [result.reward for result in results]

:class:`~hopgym.serving.remote_rollouts.RemoteRollouts` plays the same loop (:meth:`Rollouts.play`)
on ``hopgym serve env`` servers instead.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, SupportsFloat, TypeVar

import gymnasium as gym

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.chat import chat_env
from hopgym.envs.env_checker import ContractChecker, env_checker_option
from hopgym.envs.outcome import Outcome
from hopgym.errors import ActionError, ConfigError, ErrorDetail, ModelError, error_detail, error_text
from hopgym.moved import moved_names
from hopgym.serving.env_pool import EnvPool

if not TYPE_CHECKING:  # the type checker flags an old path (and keeps checking every other name)
    __getattr__ = moved_names(__name__)  # names that moved to hopgym.serving.task_rows still import

T = TypeVar("T")
StepOutcome = tuple[Mapping[str, Any], SupportsFloat, bool, bool, Mapping[str, Any]]
"""What ``env.step`` returns: observation, reward, terminated, truncated, info."""
RolloutsFactory = Callable[[str, "Mapping[str, Any] | None", int], "Rollouts"]
"""Makes the rollouts of ``(env_id, env_kwargs, concurrency)``: :class:`Rollouts` (in process), or the env
servers' (``hopgym.serving.remote_rollouts.on_servers``)."""
Policy = Callable[[Mapping[str, Any], Mapping[str, Any]], Awaitable[Any]]
"""An async policy: the env's latest observation and info -> the next action (see the env contract)."""

_ENV_CREATION = threading.Lock()
"""One env is made at a time in this process: loading tasks parses tool code with ``ast``, which CPython
3.11 does not support from several threads at once ("AST constructor recursion depth mismatch")."""


def make_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)``, safe to call from any thread (see :data:`_ENV_CREATION`), its
    first reset and step checked against the env contract (:class:`ContractChecker`) unless the kwargs
    hold ``disable_env_checker=True``, which also turns off Gymnasium's own checker."""
    disabled, kwargs = env_checker_option(env_kwargs or {})
    with _ENV_CREATION:
        env = gym.make(env_id, disable_env_checker=disabled or None, **kwargs)
    return env if disabled else ContractChecker(env, env_id)


@dataclass
class Rollout:
    """One episode as it went, filled in while it runs: an episode that failed midway still shows how far
    it got, and ``error`` says why (``Class: message``, with ``error_detail`` its class and fields). Its
    :attr:`outcome` is what eval records and training records take "ended", "correct" and the reward
    from."""

    observation: Mapping[str, Any] = field(default_factory=dict)
    """The last observation (its ``messages`` are the whole conversation)."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """The last ``info`` (on termination: ``correct``, ``answer``, ``metrics``)."""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    turns: int = 0
    parallel_turns: int = 0
    """Turns whose action made more than one tool call."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """The env's call records of every step, in order."""
    latency_ms: float = 0.0
    """From reset to the end, not counting the wait for a free env."""
    error: str | None = None
    error_detail: ErrorDetail | None = None
    server: str | None = None
    """The env server that played the episode to its end (``--env-url``: ``RemoteRollouts``); None: in
    process."""
    cut_off: list[str] = field(default_factory=list)
    """Each env server that died or refused while it had the episode (``URL: why``), in order; the episode
    was then played again from its start on another, so nothing above counts a cut-off attempt."""

    @property
    def outcome(self) -> Outcome:
        """The outcome of the last step (:data:`~hopgym.envs.outcome.NOT_ENDED` before one)."""
        return Outcome.of_step(self.reward, self.terminated, self.truncated, self.info)

    def fail(self, exc: BaseException) -> None:
        """End the episode with ``exc`` as its error (text and detail)."""
        self.error, self.error_detail = error_text(exc), error_detail(exc)


class Rollouts:
    """Episodes of ``env_id`` (made with ``env_kwargs``), up to ``concurrency`` at once, each on an env of
    one pool. Use it as an async context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(
        self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, concurrency: int = 8
    ) -> None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.concurrency = concurrency
        self._executor = ThreadPoolExecutor(max_workers=concurrency + 1, thread_name_prefix="hopgym-env")
        self._pool: EnvPool | None = None

    def make_env(self) -> gym.Env:
        return make_env(self.env_id, self.env_kwargs)

    async def in_thread(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: function(*args, **kwargs))

    async def start(
        self, size: int | None = None, first_env: gym.Env | None = None, prefill: bool = True
    ) -> None:
        """Make the pool of ``size`` envs (default: ``concurrency``; ``first_env`` among them, if given) and
        warm their sandboxes before the first episode, so that neither slows the first episodes down;
        without ``prefill``, only the first env is made now and the others when episodes ask for them."""
        first = first_env if first_env is not None else await self.in_thread(self.make_env)
        self._pool = EnvPool(self.make_env, size or self.concurrency, envs=[first], background=self._executor)
        if prefill:
            await self._pool.fill()
            for env in self._pool.envs:
                await self.in_thread(chat_env(env).warm_up)

    async def close(self) -> None:
        """Wait for the env threads (envs still being made, steps still running), then close every env and
        its sandbox; no episode runs after this."""
        if self._pool is None:  # nothing made: nothing to wait for (and no thread needed, even at exit)
            self.shutdown()
            return
        await asyncio.get_running_loop().run_in_executor(None, self._close_envs)

    def _close_envs(self) -> None:
        self.shutdown()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close_all()

    def shutdown(self) -> None:
        """Stop the env threads (waiting for those still running)."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    @property
    def started(self) -> bool:
        return self._pool is not None

    async def acquire(self) -> gym.Env:
        """A free env of the pool (waiting for one), for an episode the caller drives itself (a verifiers
        rollout); give it back with :meth:`release`."""
        return await self._started_pool().acquire()

    def release(self, env: gym.Env, healthy: bool = True) -> None:
        """Take back an env from :meth:`acquire`; an unhealthy one is closed and replaced."""
        self._started_pool().release(env, healthy)

    def _started_pool(self) -> EnvPool:
        if self._pool is None:
            raise RuntimeError("Rollouts.start() must come before episodes")
        return self._pool

    async def __aenter__(self) -> Rollouts:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def episode(
        self, policy: Policy, options: Mapping[str, Any] | None = None, seed: int | None = None
    ) -> Rollout:
        """Play one episode to its end on a free env: ``reset(seed, options)`` (``{"index": i}`` or
        ``{"task_id": id}``; none draws a task), then the policy's actions until the env ends it. Any
        exception ends only this episode, as its ``error`` (cancellation still propagates). An env whose
        episode failed other than by the policy's model or an invalid action is replaced."""
        self._started_pool()
        rollout = Rollout()
        started = time.perf_counter()
        try:
            env = await self.acquire()
            healthy = True
            try:
                started = time.perf_counter()  # waiting for an env is not episode time
                reset = functools.partial(self.in_thread, env.reset)
                await self.play(
                    reset, functools.partial(self.in_thread, env.step), policy, rollout, options, seed
                )
            except Exception as exc:
                # After a model failure or a rejected action the env is fine (the next reset starts
                # afresh); after anything else it may not be, so it is replaced.
                healthy = isinstance(exc, (ModelError, ActionError))
                raise
            finally:
                self.release(env, healthy)
        except Exception as exc:
            rollout.fail(exc)
        rollout.latency_ms = round((time.perf_counter() - started) * 1000, 1)
        return rollout

    async def play(
        self,
        reset: Callable[..., Awaitable[tuple[Mapping[str, Any], Mapping[str, Any]]]],
        step: Callable[[Any], Awaitable[StepOutcome]],
        policy: Policy,
        rollout: Rollout,
        options: Mapping[str, Any] | None,
        seed: int | None,
        actions: list[Any] | None = None,
    ) -> None:
        """The episode loop, on an env's async ``reset(seed=, options=)`` and ``step(action)``, filling
        ``rollout`` (from scratch) as it goes. ``actions`` holds the policy's actions so far: an episode
        played again from its start (its env server died) sends those first, and asks the policy only
        for the turns after them, so the policy sees each observation once."""
        actions = [] if actions is None else actions
        rollout.observation, rollout.info = await reset(seed=seed, options=options)
        rollout.reward, rollout.terminated, rollout.truncated = 0.0, False, False
        rollout.turns, rollout.parallel_turns, rollout.calls = 0, 0, []
        while not (rollout.terminated or rollout.truncated):
            if rollout.turns < len(actions):
                action = actions[rollout.turns]
            else:
                action = await policy(rollout.observation, rollout.info)
                actions.append(action)
            if isinstance(action, Mapping) and len(action.get("tool_calls") or ()) > 1:
                rollout.parallel_turns += 1
            outcome = await step(action)
            rollout.observation, reward, rollout.terminated, rollout.truncated, rollout.info = outcome
            rollout.reward = float(reward)
            rollout.turns += 1
            rollout.calls.extend(rollout.info.get("calls") or ())

    async def run(
        self, policy: Policy, episodes: Sequence[Mapping[str, Any]], seed: int | None = None
    ) -> list[Rollout]:
        """Play one episode per entry of ``episodes`` (each the ``reset`` options: ``{"index": i}`` or
        ``{"task_id": id}``), ``concurrency`` at once, and return their rollouts in that order. Episode
        ``k`` resets with ``seed + k`` when ``seed`` is given."""
        return list(
            await asyncio.gather(
                *(
                    self.episode(policy, options, None if seed is None else seed + k)
                    for k, options in enumerate(episodes)
                )
            )
        )
