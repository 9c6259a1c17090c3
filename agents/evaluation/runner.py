"""The evaluation runner behind ``hopgym eval``: many episodes at once, one JSON line per finished one.

Model calls are asyncio coroutines; env resets and steps (sandboxed tool calls) run in worker threads,
one env per concurrent episode, so a slow tool never blocks the model calls of other episodes. Finished
episodes are appended to ``episodes.jsonl`` at once; ``resume`` skips the (task id, sample) pairs already
there. A model-server or sandbox failure ends only its episode, recorded with the reason.

With ``samples`` K each selected task runs K times; sample k resets its env with seed ``seed + k`` and, when
the model config carries a ``seed``, asks the model with ``seed + k`` too, so the samples differ and each
is reproducible.

Where episodes run is the executor's business (``agents/evaluation/episode_runner.py``: in this process, or
on a cluster's nodes through ``agents/evaluation/ray_executor.py``). Either streams finished records back
to :class:`EvalRun`, which alone writes the run folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import gymnasium as gym
from tqdm import tqdm

from hopgym.agents.evaluation.episode_runner import (
    Episode,
    EpisodeRunner,
    EvalConfig,
    Executor,
    LocalExecutor,
)
from hopgym.agents.evaluation.provenance import finish_provenance, start_provenance
from hopgym.agents.evaluation.records import (
    EPISODES_FILE,
    LOCK_FILE,
    RUN_FILE,
    RUN_FILES,
    SUMMARY_JSON,
    SUMMARY_MD,
    EpisodeRecord,
    EpisodeWriter,
    check_resumable,
    drop_failed_episodes,
    lock_run_folder,
    read_episodes,
)
from hopgym.agents.evaluation.summary import markdown_table, run_title, summarize
from hopgym.agents.evaluation.training_record import overlap_warning
from hopgym.agents.policies.registry import check_agent_for_env
from hopgym.envs.chat import chat_env
from hopgym.envs.env_options import check_env_options
from hopgym.errors import ConfigError, one_line
from hopgym.run_folder import check_files, exists, read_json, write_json, write_text
from hopgym.tasks.sampling import stratified_sample, task_stratum

EXECUTORS = ("local", "ray")
T = TypeVar("T")


CHOOSERS = {"--limit": "limit", "--sample": "sample", "--task": "task_ids"}
"""The options that choose which tasks run, and the config field of each."""


def task_indices(tasks: Sequence[Any], task_ids: Sequence[str]) -> list[int]:
    """The indices of the tasks named ``task_ids``, in that order; an unknown or repeated id is an error."""
    index_of = {str(task.id): i for i, task in enumerate(tasks)}
    unknown = [task_id for task_id in task_ids if task_id not in index_of]
    if unknown:
        examples = ", ".join(list(index_of)[:3])
        named = ", ".join(unknown)
        raise ConfigError(f"--task {named}: no such task in this env's data (ids look like {examples})")
    repeated = sorted({task_id for task_id in task_ids if task_ids.count(task_id) > 1})
    if repeated:
        raise ConfigError(f"--task {', '.join(repeated)} given twice; use --samples K to run a task K times")
    return [index_of[task_id] for task_id in task_ids]


class EvalRun:
    """One ``hopgym eval`` run over a run folder."""

    def __init__(self, config: EvalConfig) -> None:
        if config.concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1, got {config.concurrency}")
        if config.limit is not None and config.limit < 1:
            raise ConfigError(f"--limit must be at least 1, got {config.limit}")
        if config.samples < 1:
            raise ConfigError(f"--samples must be at least 1, got {config.samples}")
        choosers = [name for name, value in CHOOSERS.items() if getattr(config, value) not in (None, ())]
        if len(choosers) > 1:
            raise ConfigError(f"{' and '.join(choosers)} all choose the tasks; pass one of them")
        if config.executor not in EXECUTORS:
            raise ConfigError(f"unknown executor {config.executor!r}; valid: {', '.join(EXECUTORS)}")
        if config.executor == "ray":
            from hopgym.agents.evaluation.ray_executor import require_ray

            require_ray()
        check_env_options(config.env_id, config.env_kwargs)
        self.config = config
        self.out = Path(config.out)
        self.episodes_path = self.out / EPISODES_FILE
        self._runner = EpisodeRunner(config, config.concurrency)  # checks the agent and model options
        self._finished = 0
        self._correct = 0
        self._errors = 0
        self._provenance: dict[str, Any] = {}
        self._warnings: list[str] = []
        self._lock: IO[bytes] | None = None

    # -- preparation -------------------------------------------------------------------------------

    def _check_folder(self) -> None:
        """Refuse a folder that holds another run, or this run without ``resume``; writes nothing."""
        if self.config.retry_errors and not self.config.resume:
            raise ConfigError("--retry-errors redoes failed episodes of an existing run: add --resume")
        check_files(self.out, (*RUN_FILES, LOCK_FILE))
        if exists(self.out / LOCK_FILE):  # a run still writing the folder is named as such
            lock_run_folder(self.out).close()
        identity = self.config.run_identity()
        check_resumable(self.out, self.out / RUN_FILE, self.episodes_path, identity, self.config.resume)

    def _open_folder(self, env: gym.Env, expected: int) -> list[EpisodeRecord]:
        """Create the run folder (options and data are checked by now) with its run.json (identity and
        provenance); return the records already there."""
        previous = (read_json(self.out / RUN_FILE) or {}).get("provenance")
        self._provenance = start_provenance(chat_env(env), expected, previous)
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock = lock_run_folder(self.out)  # released when run() ends
        previous_records = read_episodes(self.episodes_path, repair=True)  # a damaged file: refused here
        self._write_run_file()
        return previous_records

    def _write_run_file(self) -> None:
        run = {**self.config.run_identity(), "provenance": self._provenance}
        write_json(self.out / RUN_FILE, self._with_warnings(run))

    def _executor(self, first_env: gym.Env) -> Executor:
        if self.config.executor == "ray":
            from hopgym.agents.evaluation.ray_executor import RayExecutor

            return RayExecutor(self.config)
        return LocalExecutor(self._runner, first_env)

    # -- running -----------------------------------------------------------------------------------

    def _count(self, record: EpisodeRecord) -> None:
        self._finished += 1
        self._correct += record.correct
        self._errors += record.error is not None

    async def _run(self, executor: Executor, pending: list[Episode], bar: tqdm) -> None:
        writer = EpisodeWriter(self.episodes_path)
        try:
            async with contextlib.aclosing(executor.stream(pending)) as records:
                async for record in records:
                    writer.write(record)
                    self._count(record)
                    bar.set_postfix(
                        acc=f"{self._correct / self._finished:.1%}", errors=self._errors, refresh=False
                    )
                    bar.update(1)
        finally:
            writer.close()

    def run(self) -> dict[str, Any]:
        """Run every pending episode, then write and return the summary. The folder is checked, the first
        env made (its options and data checked) and the executor reached before anything is written: a
        mistake leaves no half-made run behind."""
        self._check_folder()
        try:
            return self._run_in_folder()
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def _run_in_folder(self) -> dict[str, Any]:
        first_env = self._runner.make_env()
        try:
            check_agent_for_env(self.config.agent, self.config.env_id, chat_env(first_env))
            selected = self._select(chat_env(first_env).tasks)
            warning = overlap_warning(self.config.training, self.config.env_id, {s[1] for s in selected})
            self._warnings = [warning] if warning else []
            executor = self._executor(first_env)
            previous = self._open_folder(first_env, len(selected))
            keys = {(task_id, sample) for _, task_id, sample in selected}
            if self.config.retry_errors:
                previous = drop_failed_episodes(self.episodes_path, previous, keys)
            done = {record.key for record in previous}
            pending = [episode for episode in selected if (episode[1], episode[2]) not in done]
            for record in previous:
                if record.key in keys:  # the progress bar counts this run's episodes only
                    self._count(record)
            bar = tqdm(
                total=len(selected),
                initial=len(selected) - len(pending),
                desc=f"{self.config.agent}·{self.config.model.model}",
                unit="ep",
                disable=not self.config.progress,
                dynamic_ncols=True,
            )
            with bar:
                if pending:
                    run_to_completion(self._run(executor, pending, bar))
        finally:
            first_env.close()
            self._runner.shutdown()
        recorded = keys & {record.key for record in read_episodes(self.episodes_path)}
        self._provenance = finish_provenance(self._provenance, len(recorded))
        self._write_run_file()
        return self.write_summary()

    def _select(self, tasks: Sequence[Any]) -> list[Episode]:
        """(index, task id, sample) of every episode this run holds: the first ``limit`` tasks, or a
        stratified ``sample`` of them, or those named in ``task_ids``, or all, each ``samples`` times."""
        indices = list(range(len(tasks)))[: self.config.limit]
        if self.config.task_ids:
            indices = task_indices(tasks, self.config.task_ids)
        if self.config.sample is not None:
            indices = stratified_sample(
                [task_stratum(task) for task in tasks], self.config.sample, self.config.seed
            )
        return [(i, str(tasks[i].id), k) for i in indices for k in range(self.config.samples)]

    def write_summary(self) -> dict[str, Any]:
        records = read_episodes(self.episodes_path)
        run = {**self.config.run_identity(), "out": str(self.out), "provenance": self._provenance}
        return write_summary_files(self.out, records, self._with_warnings(run))

    def _with_warnings(self, run: dict[str, Any]) -> dict[str, Any]:
        """``run`` plus the run's warnings, when it has any (a run folder without them reads as before)."""
        return {**run, "warnings": self._warnings} if self._warnings else run


def write_summary_files(
    out: Path, records: Sequence[EpisodeRecord], run: Mapping[str, Any]
) -> dict[str, Any]:
    """Write ``summary.json`` and ``summary.md`` of these records into ``out``; return the summary. The run's
    ``warnings`` (e.g. evaluated tasks the model was trained on) lead both."""
    summary = summarize(records, run=run)
    listed = run.get("warnings")  # a rescored run's come from its run.json: a list of text, or ignored
    warnings = [str(warning) for warning in listed] if isinstance(listed, list) else []
    if warnings:
        summary["warnings"] = warnings
    write_json(out / SUMMARY_JSON, summary)
    table = markdown_table({run_title(summary): summary})
    notes = "".join(f"> **Warning:** {warning}\n\n" for warning in warnings)
    write_text(out / SUMMARY_MD, f"# {run_title(summary)}\n\n{notes}{table}\n")
    return summary


def run_verdict(records: Sequence[EpisodeRecord]) -> tuple[int, str | None]:
    """The exit status of a finished run and the line that explains it (None when no episode failed):
    1 when no episode reached the model or every episode failed, else 0."""
    failed = [record for record in records if record.error]
    if not failed:
        return 0, None
    cause = one_line(Counter(str(record.error) for record in failed).most_common(1)[0][0])
    counted = f"{len(failed)} of {len(records)} episodes failed"
    again = "; once fixed, --resume --retry-errors runs them again"
    if not any(record.agent_count("model_turns") for record in records):
        return 1, f"no episode reached the model ({counted}): {cause}{again}"
    if len(failed) == len(records):
        return 1, f"every episode failed ({counted}): {cause}{again}"
    return 0, f"{counted} (see 'error' in {EPISODES_FILE}); the most common cause: {cause}{again}"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_to_completion(main: Awaitable[T], leftover_grace: float = 1.0) -> T:
    """Run ``main`` on a fresh event loop and return its result, then cancel whatever else is still pending
    (litellm's logging tasks have been seen to hang ``asyncio.run`` at shutdown) and close the loop without
    waiting on it.

    Ctrl-C and SIGTERM reach the loop as a cancel of ``main``, raised here as ``KeyboardInterrupt`` once
    ``main`` has cleaned up: Python's own handler raises wherever the main thread happens to be, and a
    ``KeyboardInterrupt`` raised inside a finalizer (aiohttp's ``__del__``) is swallowed, so the run
    would go on as if never stopped. A second signal falls back to the handler that was there before."""
    loop = asyncio.new_event_loop()
    run: asyncio.Future[T] = asyncio.ensure_future(main, loop=loop)
    stopped: list[int] = []
    previous = _route_stop_signals(loop, run, stopped)
    try:
        return loop.run_until_complete(run)
    except asyncio.CancelledError:
        if not stopped:
            raise
        raise KeyboardInterrupt from None
    finally:
        _restore_signals(loop, previous)
        leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for leftover in leftovers:
            leftover.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=leftover_grace))
        loop.close()


def _route_stop_signals(
    loop: asyncio.AbstractEventLoop, run: asyncio.Future[Any], stopped: list[int]
) -> dict[int, Any]:
    """Deliver SIGINT and SIGTERM to ``loop`` as a cancel of ``run``; return the handlers replaced
    (none off the main thread, where signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def stop(sig: int) -> None:
        stopped.append(sig)
        run.cancel()
        _restore_signals(loop, previous)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    return previous


def _restore_signals(loop: asyncio.AbstractEventLoop, previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        loop.remove_signal_handler(sig)
        signal.signal(sig, handler)
    previous.clear()
