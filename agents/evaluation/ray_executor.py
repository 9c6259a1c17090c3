"""``hopgym eval --executor ray``: episodes on a Ray cluster's nodes, records streamed back to the driver.

One actor per alive node with a CPU, pinned there; each holds an :class:`EpisodeRunner` (its own model
client and sandbox pool, made from the same env options) and runs up to ``concurrency`` episodes at once.
The driver keeps every actor busy, writes each record as it arrives (so ``--resume`` works as with the local
executor) and, when a node dies, gives the episodes that were running there to the nodes still alive: an
episode's record is written only once it has come back, so none is lost and none is written twice.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any

from hopgym.agents.evaluation.episode_runner import Episode, EpisodeRunner, EvalConfig
from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.errors import ClusterError, one_line
from hopgym.serving.ray_cluster import join_cluster, require_ray

PATH_OPTIONS = ("data_path", "kg_path")
"""Env options naming files: a relative one is made absolute for the nodes, whose actors do not run in the
driver's working directory."""


ray = require_ray()
from ray.exceptions import ObjectLostError, RayActorError  # noqa: E402 - only once ray is there
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402


@ray.remote(num_cpus=1, max_restarts=0)
class EpisodeActor:
    """One node's episodes. Each run brings its config and gets a fresh runner (model client, sandbox
    pool); the actor itself outlives the run, so a driver running several (``hopgym ablate``, the tests)
    pays the actor's start, mostly imports (seconds; litellm's too for a model not served as openai/), once
    per node."""

    def __init__(self) -> None:
        self._runner: EpisodeRunner | None = None
        self._episodes: set[asyncio.Future[Any]] = set()
        self._node = ray.get_runtime_context().get_node_id()

    async def start(self, config: EvalConfig, size: int) -> str:
        """Make this run's runner and fill its pool; on failure (e.g. the data missing on this node) close
        what was made, so the actor stays clean for the next run."""
        runner = EpisodeRunner(config, config.concurrency)
        try:
            await runner.start(size)
        except BaseException:
            await runner.close()
            raise
        self._runner = runner
        return self._node

    async def episode(self, index: int, task_id: str, sample: int) -> EpisodeRecord:
        if self._runner is None:
            raise RuntimeError("EpisodeActor.start() must come before episodes")
        this = asyncio.current_task()
        assert this is not None  # Ray runs each call of an async actor as a task of its event loop
        self._episodes.add(this)
        try:
            record = await self._runner.episode(index, task_id, sample)
        finally:
            self._episodes.discard(this)
        return replace(record, node=self._node)

    async def close(self) -> None:
        """End the run here: cancel the episodes still running (the driver stopped or crashed; their
        records would never be written), then close the envs and their sandbox workers."""
        for episode in self._episodes:
            episode.cancel()
        await asyncio.gather(*self._episodes, return_exceptions=True)
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.close()


_kept: dict[tuple[str, str], Any] = {}
"""(job id, node id) -> the actor kept there after a run of this driver; ended with the driver's job."""


class RayExecutor:
    """Joins the cluster at once (so a wrong address fails before the run folder is written), unless this
    process already has; it stays joined until the process exits (Ray's own exit hook leaves the cluster),
    so the runs of ``hopgym ablate`` share the nodes' actors."""

    def __init__(self, config: EvalConfig) -> None:
        self.config = for_nodes(config)
        self._causes: list[str] = []
        join_cluster(config.ray_address)
        nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
        if not nodes:
            raise ClusterError("the Ray cluster has no alive node with a CPU to run episodes on")
        job = ray.get_runtime_context().get_job_id()
        self._keys = [(job, node["NodeID"]) for node in nodes]
        self._key_of: dict[Any, tuple[str, str]] = {}

    async def _start(self, size: int) -> list[Any]:
        """One started actor per node (kept from an earlier run, else new); a node whose actor cannot start
        is left out (its cause kept), its actor kept if only the run's start failed there."""
        actors = [_kept.pop(key, None) or _new_actor(key[1]) for key in self._keys]
        self._key_of = dict(zip(actors, self._keys, strict=True))
        starts = [actor.start.remote(self.config, size) for actor in actors]
        started = await asyncio.gather(*starts, return_exceptions=True)
        live = []
        for actor, result in zip(actors, started, strict=True):
            if isinstance(result, RayActorError):
                self._causes.append(cause_of(result))
                ray.kill(actor)
            elif isinstance(result, BaseException):
                self._causes.append(cause_of(result))
                _kept[self._key_of[actor]] = actor
            else:
                live.append(actor)
        return live

    async def stream(self, pending: Sequence[Episode]) -> AsyncGenerator[EpisodeRecord, None]:
        size = min(self.config.concurrency, len(pending))
        queue = deque(pending)
        live = await self._start(size)
        running: dict[asyncio.Future[Any], tuple[Any, Episode]] = {}
        load = {actor: 0 for actor in live}

        def fill() -> None:
            """Give queued episodes to the live actors with a free place."""
            for actor in live:
                while queue and load[actor] < size:
                    item = queue.popleft()
                    future = asyncio.ensure_future(_resolve(actor.episode.remote(*item)))
                    running[future] = (actor, item)
                    load[actor] += 1

        try:
            fill()
            while running or queue:
                if not running:
                    cause = self._causes[-1] if self._causes else "no node took an episode"
                    raise ClusterError(
                        f"every Ray node running episodes failed, {len(queue)} episodes left "
                        f"(rerun with --resume); the last cause: {cause}"
                    )
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in finished:
                    actor, item = running.pop(future)
                    load[actor] -= 1
                    try:
                        record = future.result()
                    except (RayActorError, ObjectLostError) as exc:  # its node died: it runs again elsewhere
                        queue.appendleft(item)
                        if actor in live:
                            live.remove(actor)
                            self._causes.append(cause_of(exc))
                        continue
                    yield record
                fill()
        finally:
            for future in running:
                future.cancel()
            await self._finish(live)

    async def _finish(self, actors: Sequence[Any], timeout: float = 30.0) -> None:
        """Close the actors' runs (episodes still running there, envs, sandbox workers); keep each actor
        that closed in time for the driver's next run, and end the others."""
        closing = {asyncio.ensure_future(_resolve(actor.close.remote())): actor for actor in actors}
        done: set[asyncio.Future[Any]] = set()
        if closing:
            done, _ = await asyncio.wait(closing, timeout=timeout)
        for future, actor in closing.items():
            if future in done and future.exception() is None:
                _kept[self._key_of[actor]] = actor
            else:
                ray.kill(actor)


def cause_of(exc: BaseException) -> str:
    """One line on why a node failed: for an error raised in an actor, the original exception (Ray's own
    message leads with a traceback that would hide it)."""
    cause = getattr(exc, "cause", None)
    cause = cause if isinstance(cause, BaseException) else exc
    return one_line(f"{type(cause).__name__}: {cause}")


def for_nodes(config: EvalConfig) -> EvalConfig:
    """``config`` with its relative data paths made absolute (the run folder keeps them as given)."""
    kwargs = dict(config.env_kwargs)
    for key in PATH_OPTIONS:
        if kwargs.get(key) is not None:
            kwargs[key] = os.path.abspath(kwargs[key])
    return replace(config, env_kwargs=kwargs)


def _new_actor(node: str) -> Any:
    strategy = NodeAffinitySchedulingStrategy(node, soft=False)
    return EpisodeActor.options(scheduling_strategy=strategy).remote()  # type: ignore[attr-defined]


async def _resolve(ref: Any) -> Any:
    return await ref
