"""The statistics a run's summary reports: mean ± 95% interval, pass@k and pass^k.

Intervals are Student-t intervals over tasks: with several samples per task an episode's values are first
averaged per task, so the interval treats tasks, not episodes, as the independent draws (samples of one
task are correlated; counting them as independent would make the interval too narrow). With one sample
per task this is the ordinary t-interval over episodes. The t quantile is computed exactly (the closed
form of the t distribution's CDF for integer degrees of freedom, inverted by bisection), so no
statistics library is needed at run time.

pass@k is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on
Code"): the chance that at least one of k samples drawn without replacement from a task's n is correct,
``1 - C(n-c, k) / C(n, k)``. pass^k is tau-bench's (Yao et al. 2024): the chance that all k are correct,
``C(c, k) / C(n, k)``. Both are averaged over tasks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from statistics import fmean, stdev
from typing import Any, TypeVar

CONFIDENCE = 0.95
K = TypeVar("K", bound=Hashable)


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan2(t, math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df == 1:
        area = 2 * theta / math.pi
    elif df % 2:  # odd: (2/pi) (theta + sin(theta) (cos + 2/3 cos^3 + ... + cos^(df-2) terms))
        term = total = c
        for k in range(3, df - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        area = 2 * (theta + s * total) / math.pi
    else:  # even: sin(theta) (1 + 1/2 cos^2 + 1·3/(2·4) cos^4 + ... + cos^(df-2) terms)
        term = total = 1.0
        for k in range(2, df - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        area = s * total
    return 0.5 + area / 2


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile (0.5 < p < 1) of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1 or not 0.5 < probability < 1:
        raise ValueError(f"t_quantile needs df >= 1 and 0.5 < probability < 1, got {df} and {probability}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if _t_cdf(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """``mean``, ``low``, ``high``, ``half_width`` and ``n`` of a Student-t interval; with fewer than two
    values the bounds are None (no spread to estimate)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "half_width": None, "n": 0}
    mean = fmean(values)
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "half_width": None, "n": n}
    half = t_quantile((1 + confidence) / 2, n - 1) * stdev(values) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "half_width": half, "n": n}


def task_means(pairs: Iterable[tuple[K, float]]) -> dict[K, float]:
    """Task → the mean of its values, in first-seen order, from (task, value) pairs."""
    groups: dict[K, list[float]] = {}
    for task, value in pairs:
        groups.setdefault(task, []).append(float(value))
    return {task: fmean(values) for task, values in groups.items()}


def per_task_means(pairs: Iterable[tuple[Hashable, float]]) -> list[float]:
    """The mean value of each task, in first-seen order, from (task, value) pairs."""
    return list(task_means(pairs).values())


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``c`` correct among ``n`` samples (Chen et al. 2021)."""
    _check_counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one task with ``c`` correct among ``n`` samples (tau-bench)."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def _pass_k_series(n: int, c: int, top: int) -> tuple[list[float], list[float]]:
    """pass@k and pass^k of one task for k = 1..top, in O(top): C(n-c, k)/C(n, k) and C(c, k)/C(n, k) are
    products of k ratios, each one the previous one times a factor (exact binomials for every k would cost
    O(top^2) big-integer work: ~45 s for one task of 14,000 samples)."""
    none_correct, all_correct = 1.0, 1.0
    at, hat = [], []
    for j in range(top):
        none_correct *= max(n - c - j, 0) / (n - j)
        all_correct *= max(c - j, 0) / (n - j)
        at.append(1.0 - none_correct)
        hat.append(all_correct)
    return at, hat


def pass_k_table(correct_by_task: Mapping[str, Sequence[bool]]) -> dict[str, dict[str, float]]:
    """``{"pass_at_k": {"1": .., ..}, "pass_hat_k": {...}}`` averaged over tasks, for every k up to the
    fewest samples any task has; empty dicts when there are no tasks. Linear in the samples of each task."""
    if not correct_by_task:
        return {"pass_at_k": {}, "pass_hat_k": {}}
    counts = [(len(samples), sum(map(bool, samples))) for samples in correct_by_task.values()]
    top = min(n for n, _ in counts)
    series = [_pass_k_series(n, c, top) for n, c in counts]
    return {
        "pass_at_k": {str(k + 1): fmean(at[k] for at, _ in series) for k in range(top)},
        "pass_hat_k": {str(k + 1): fmean(hat[k] for _, hat in series) for k in range(top)},
    }
