"""The tests of a paired comparison of two runs, and how many paired tasks a difference needs; from scipy
(extra ``report``), imported only here and only when a paired comparison is asked for.

- The interval of a mean difference is a percentile bootstrap over tasks: :data:`RESAMPLES` resamples of
  the paired tasks with replacement (``scipy.stats.bootstrap``; the tasks are the independent draws, the
  pair of a task is kept together), drawn from ``numpy``'s generator seeded with :data:`SEED`, so the same
  two runs always give the same table.
- A binary per-task metric (answer correctness with one sample per task) gets the exact McNemar test: a
  two-sided binomial test of the discordant pairs at 1/2 (``scipy.stats.binomtest``).
- A continuous one (F1, Value Acc, correctness averaged over samples) gets a sign-flip permutation test of
  the mean difference (``scipy.stats.permutation_test``, ``permutation_type="samples"``): under the paired
  null the two runs' values of a task are exchangeable, so each difference's sign is a fair coin. It tests
  the statistic the interval is on, needs no symmetry or continuity (Wilcoxon's signed-rank test drops zero
  differences and loses its exact distribution to ties, both common in bounded metrics such as F1), is
  exact up to 13 tasks (2^13 sign patterns fit in :data:`RESAMPLES`) and seeded beyond. On binary values it
  is McNemar's test again: the discordant pairs are the nonzero differences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hopgym.agents.evaluation.stats import CONFIDENCE
from hopgym.errors import ConfigError

SEED = 36
"""The seed of the bootstrap's and the permutation test's resampling (issue 36)."""
RESAMPLES = 10_000
"""Bootstrap resamples and random sign patterns (the percentile bounds move by ~0.3 points at n=100)."""
ALPHA = 0.05
_POWER_BLOCK = 256
_BATCH_ELEMENTS = 2_000_000
"""Resampled values held at once (16 MB of floats): a run of 100,000 tasks is resampled in batches."""


def _stats() -> Any:
    try:
        import scipy.stats
    except ImportError as exc:
        raise ConfigError("the paired comparison needs scipy: pip install 'hopgym[report]'") from exc
    return scipy.stats


def _batch(n: int) -> int:
    return max(1, _BATCH_ELEMENTS // max(n, 1))


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """The two-sided exact McNemar p-value of ``a_only`` pairs where only A was right and ``b_only`` where
    only B was: a binomial test of ``b_only`` among the discordant pairs at 1/2 (1.0 with none)."""
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got {a_only} and {b_only}")
    if a_only + b_only == 0:
        return 1.0
    return float(_stats().binomtest(b_only, a_only + b_only, 0.5).pvalue)


def bootstrap_interval(
    differences: Sequence[float], confidence: float = CONFIDENCE, seed: int = SEED
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of per-task ``differences`` (None below two tasks)."""
    values = np.asarray(differences, dtype=float)
    if len(values) < 2:
        return None
    if np.all(values == values[0]):  # every resample has this mean (scipy would warn of degenerate data)
        return float(values[0]), float(values[0])
    result = _stats().bootstrap(
        (values,),
        np.mean,
        n_resamples=RESAMPLES,
        batch=_batch(len(values)),
        vectorized=True,
        method="percentile",
        confidence_level=confidence,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def sign_flip_p(differences: Sequence[float], seed: int = SEED) -> float:
    """The two-sided p-value of a sign-flip permutation test of the mean of per-task ``differences`` (1.0
    for fewer than two tasks, whose two sign patterns are as extreme as each other, or none nonzero)."""
    values = np.asarray(differences, dtype=float)
    if len(values) < 2 or not values.any():
        return 1.0
    result = _stats().permutation_test(
        (values,),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=RESAMPLES,
        batch=_batch(len(values)),
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)


# -- how many paired tasks ----------------------------------------------------------------------------


def discordant_rates(accuracy_a: float, accuracy_b: float, correlation: float) -> tuple[float, float]:
    """(share of tasks only A gets right, share only B gets right) of two runs with these accuracies whose
    per-task correctness has this (phi) correlation; a ``ValueError`` when no such pair of runs exists."""
    for name, value in (("accuracy_a", accuracy_a), ("accuracy_b", accuracy_b)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} must be a fraction in [0, 1], got {value}")
    both = accuracy_a * accuracy_b + correlation * math.sqrt(
        accuracy_a * (1 - accuracy_a) * accuracy_b * (1 - accuracy_b)
    )
    a_only, b_only = accuracy_a - both, accuracy_b - both
    if min(both, a_only, b_only, 1 - both - a_only - b_only) < -1e-12:
        raise ValueError(
            f"no two runs of accuracies {accuracy_a} and {accuracy_b} have correlation {correlation}"
        )
    return max(a_only, 0.0), max(b_only, 0.0)


def _check_rates(a_only: float, b_only: float) -> None:
    if a_only < 0 or b_only < 0 or a_only + b_only > 1:
        raise ValueError(f"discordant rates must be >= 0 and sum to at most 1, got {a_only} and {b_only}")


def tasks_for_interval(a_only: float, b_only: float, confidence: float = CONFIDENCE) -> int | None:
    """Paired tasks from which the expected 95% interval of the accuracy difference excludes 0, at these
    discordant rates: n = (z · sd / difference)^2, the per-task difference's sd being
    sqrt(a_only + b_only - difference^2). A coin flip's chance of a significant result, not 80%: see
    :func:`tasks_for_power`. None when the rates are equal (no n suffices)."""
    _check_rates(a_only, b_only)
    difference = b_only - a_only
    if difference == 0:
        return None
    z = float(_stats().norm.ppf((1 + confidence) / 2))
    variance = a_only + b_only - difference**2
    return max(2, math.ceil(z * z * variance / difference**2))


def _rejection_chance(most: int, a_only: float, b_only: float, alpha: float) -> np.ndarray:
    """For d = 0..most discordant pairs: the chance that the exact McNemar test at ``alpha`` rejects,
    B's share of the discordant pairs being b_only / (a_only + b_only)."""
    binom = _stats().binom
    d = np.arange(most + 1)
    # The largest k with 2·P(X <= k) <= alpha under Binomial(d, 1/2): reject when B's c <= k or c >= d-k.
    k = binom.ppf(alpha / 2, d, 0.5)
    k = np.where(binom.cdf(k, d, 0.5) <= alpha / 2, k, k - 1)
    share = b_only / (a_only + b_only)
    return np.where(k >= 0, binom.cdf(k, d, share) + binom.sf(d - k - 1, d, share), 0.0)


def _power_at(tasks: np.ndarray, reject: np.ndarray, discordant: float) -> np.ndarray:
    """Exact McNemar power at each of a block of increasing ``tasks`` counts, from :func:`_rejection_chance`,
    in one pmf call (scipy's cost is per call). Only d within 10 sd of its mean is summed: the rest weighs
    under 1e-20."""
    spread = 10 * math.sqrt(tasks[-1] * discordant * (1 - discordant)) + 1
    low, high = int(tasks[0] * discordant - spread), int(tasks[-1] * discordant + spread)
    d = np.arange(max(0, low), min(len(reject) - 1, high) + 1)
    return np.asarray(_stats().binom.pmf(d[None, :], tasks[:, None], discordant) @ reject[d])


def mcnemar_power(tasks: int, a_only: float, b_only: float, alpha: float = ALPHA) -> float:
    """The exact power of the two-sided exact McNemar test at ``alpha`` over ``tasks`` paired tasks with
    these discordant rates: the sum over the number of discordant pairs d ~ Binomial(tasks, a_only +
    b_only) of the chance the test rejects given d."""
    _check_rates(a_only, b_only)
    if a_only + b_only == 0:
        return 0.0
    reject = _rejection_chance(tasks, a_only, b_only, alpha)
    return float(_power_at(np.array([tasks]), reject, a_only + b_only)[0])


def tasks_for_power(
    a_only: float, b_only: float, power: float = 0.8, alpha: float = ALPHA, most: int = 100_000
) -> int | None:
    """The fewest paired tasks at which the exact McNemar test at ``alpha`` has ``power`` at these
    discordant rates; None when the rates are equal or more than ``most`` tasks would be needed.

    Exact power is not monotone in n (a few more tasks can lose a little), but its saw-tooth is well under
    5 points: below ``power`` - 0.05 at some n, it stays below ``power`` for every smaller n. So the scan
    starts at the largest n of the grid ``most``·0.9^k with power that low, not at 1 (a scan from 1 took
    ~20 s of CPU when 100,000 tasks were not enough)."""
    _check_rates(a_only, b_only)
    if a_only == b_only:
        return None
    reject = _rejection_chance(most, a_only, b_only, alpha)
    discordant = a_only + b_only
    start = most
    while start > 1 and _power_at(np.array([start]), reject, discordant)[0] >= power - 0.05:
        start = int(start * 0.9)
    if start == most:
        return None
    for first in range(max(start, 1), most + 1, _POWER_BLOCK):
        tasks = np.arange(first, min(first + _POWER_BLOCK, most + 1))
        reached = np.flatnonzero(_power_at(tasks, reject, discordant) >= power)
        if reached.size:
            return int(tasks[reached[0]])
    return None
