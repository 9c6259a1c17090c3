"""A paired comparison of two runs on the tasks both ran (``hopgym report A B --paired``): B − A of answer
correctness and of every per-episode env metric, with a bootstrap interval and a paired test each
(:mod:`hopgym.agents.evaluation.paired_stats`).

How episodes are paired:

- The unit is the task. With several samples per task (``--samples``), a task's value in a run is the mean
  over its samples, as in the summary's intervals: samples of one task are correlated, and sample k of A
  shares only an env seed with sample k of B, not a model draw, so pairing (task, sample) would count one
  task as k independent pairs and narrow the interval. With one sample per task this is the episode.
- An episode that ended with an ``error`` (the model server, the sandbox or the agent failed: no answer
  was scored) is left out, as Table 5's pairing does: it measured the infrastructure, not the model
  (``hopgym eval --resume --retry-errors`` runs it again). A task both runs hold is dropped as *errored*
  when every episode of it in one run ended with an error; the errored episodes left out are counted.
- Tasks only one run holds are dropped and counted (*only in A*, *only in B*).
- A metric's n is the paired tasks where both runs recorded it: an env metric is ``None`` when it does
  not apply and absent when the episode did not end (truncated), so its n can be below the tasks paired.
- A metric whose per-task values are all 0 or 1 in both runs is binary and gets the exact McNemar test;
  any other gets the sign-flip permutation test. Answer correctness averaged over several samples is not
  binary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from hopgym.agents.evaluation import paired_stats
from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.agents.evaluation.stats import CONFIDENCE, task_means
from hopgym.agents.evaluation.summary import episode_values
from hopgym.errors import DataError

HEADLINE = "answer_correctness"


@dataclass(frozen=True)
class PairedRuns:
    """The per-task values of two runs on the tasks both hold, and what was left out."""

    values: dict[str, tuple[list[float], list[float]]]
    """Metric → (A's, B's) per-task values, over the paired tasks where both runs recorded it, in order."""
    tasks: int
    """Tasks paired: in both runs, each with an episode that ended without error."""
    only_in_a: int
    only_in_b: int
    errored: int
    """Tasks in both runs left out because every episode of them in one run ended with an error."""
    errored_episodes: tuple[int, int]
    """Episodes of A's and B's shared tasks left out for their error."""


def compared_values(record: EpisodeRecord) -> dict[str, float]:
    """An episode's answer correctness and the env metrics it recorded (fractions; None is left out)."""
    return {
        key: value
        for key, value in episode_values(record).items()
        if key == HEADLINE or key in (record.metrics or {})
    }


def _by_task(records: Iterable[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    tasks: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        tasks.setdefault(record.task_id, []).append(record)
    return tasks


def _means(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    """Metric → the task's mean over these episodes (each metric over the episodes that recorded it)."""
    pairs = [(key, value) for record in records for key, value in compared_values(record).items()]
    return task_means(pairs)


def pair_runs(a: Sequence[EpisodeRecord], b: Sequence[EpisodeRecord]) -> PairedRuns:
    """Pair two runs' episodes by task (see the module docstring for what is left out and why)."""
    tasks_a, tasks_b = _by_task(a), _by_task(b)
    shared = [task for task in tasks_a if task in tasks_b]
    values: dict[str, tuple[list[float], list[float]]] = {}
    paired = errored = 0
    left_out = [0, 0]
    for task in shared:
        ended = []
        for side, records in enumerate((tasks_a[task], tasks_b[task])):
            kept = [record for record in records if record.error is None]
            left_out[side] += len(records) - len(kept)
            ended.append(kept)
        if not ended[0] or not ended[1]:
            errored += 1
            continue
        paired += 1
        means_a, means_b = _means(ended[0]), _means(ended[1])
        for key in means_a.keys() & means_b.keys():
            column_a, column_b = values.setdefault(key, ([], []))
            column_a.append(means_a[key])
            column_b.append(means_b[key])
    return PairedRuns(
        values=dict(sorted(values.items(), key=lambda item: (item[0] != HEADLINE, item[0]))),
        tasks=paired,
        only_in_a=len(tasks_a.keys() - tasks_b.keys()),
        only_in_b=len(tasks_b.keys() - tasks_a.keys()),
        errored=errored,
        errored_episodes=(left_out[0], left_out[1]),
    )


def compare_metric(values_a: Sequence[float], values_b: Sequence[float]) -> dict[str, Any]:
    """B − A of one metric over paired tasks: both means, the difference, its bootstrap interval and the
    paired test (McNemar for binary values, with the discordant counts; else the sign-flip test)."""
    differences = [vb - va for va, vb in zip(values_a, values_b, strict=True)]
    n = len(differences)
    interval = paired_stats.bootstrap_interval(differences)
    result: dict[str, Any] = {
        "n": n,
        "a": fmean(values_a),
        "b": fmean(values_b),
        "difference": fmean(differences),
        "low": None if interval is None else interval[0],
        "high": None if interval is None else interval[1],
    }
    if all(value in (0.0, 1.0) for value in (*values_a, *values_b)):
        a_only = sum(va > vb for va, vb in zip(values_a, values_b, strict=True))
        b_only = sum(vb > va for va, vb in zip(values_a, values_b, strict=True))
        p = paired_stats.mcnemar_exact(a_only, b_only)
        return {**result, "test": "mcnemar", "p_value": p, "a_only": a_only, "b_only": b_only}
    return {**result, "test": "sign_flip", "p_value": paired_stats.sign_flip_p(differences)}


def tasks_needed(correctness: dict[str, Any]) -> dict[str, int | None] | None:
    """At the discordant rates observed in answer correctness (binary), the paired tasks from which a 95%
    interval is expected to exclude 0, and from which McNemar at 0.05 has 80% power (None: equal rates)."""
    if correctness.get("test") != "mcnemar":
        return None
    a_only, b_only = correctness["a_only"] / correctness["n"], correctness["b_only"] / correctness["n"]
    return {
        "interval_excludes_0": paired_stats.tasks_for_interval(a_only, b_only),
        "mcnemar_power_80": paired_stats.tasks_for_power(a_only, b_only),
    }


def compare_runs(a: Sequence[EpisodeRecord], b: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """The paired comparison of run B against run A, as JSON-ready data (``DataError`` when no task pairs)."""
    paired = pair_runs(a, b)
    if not paired.tasks:
        raise DataError(
            f"no task can be paired: {paired.only_in_a} only in A, {paired.only_in_b} only in B, "
            f"{paired.errored} with every episode errored in one run; compare runs over the same tasks"
        )
    metrics = {key: compare_metric(*columns) for key, columns in paired.values.items()}
    return {
        "tasks": {
            "paired": paired.tasks,
            "only_in_a": paired.only_in_a,
            "only_in_b": paired.only_in_b,
            "errored": paired.errored,
        },
        "errored_episodes": dict(zip("ab", paired.errored_episodes, strict=True)),
        "direction": "b - a",
        "interval": {
            "method": "percentile bootstrap over tasks",
            "confidence": CONFIDENCE,
            "resamples": paired_stats.RESAMPLES,
            "seed": paired_stats.SEED,
        },
        "metrics": metrics,
        "tasks_needed": tasks_needed(metrics.get(HEADLINE, {})),
    }
