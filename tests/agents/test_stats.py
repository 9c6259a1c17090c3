"""The summary's statistics against reference computations: Student-t intervals (scipy, and by hand),
pass@k and pass^k (brute-force enumeration of every k-subset), the stratified task sample."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import Counter
from statistics import fmean

import pytest

from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.agents.evaluation.stats import mean_interval, pass_at_k, pass_hat_k, pass_k_table, t_quantile
from hopgym.agents.evaluation.summary import markdown_table, summarize
from hopgym.errors import ConfigError
from hopgym.tasks.sampling import stratified_sample


def test_t_quantiles_equal_scipys() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 5, 6, 7, 10, 11, 30, 99, 1000):
        for probability in (0.6, 0.9, 0.975, 0.995):
            assert t_quantile(probability, df) == pytest.approx(stats.t.ppf(probability, df), rel=1e-9)


def test_the_interval_equals_scipys_t_interval() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for n in (2, 3, 8, 41, 200):
        values = [0.0, *(float(rng.random() < 0.4) for _ in range(n - 2)), 1.0]
        interval = mean_interval(values)
        low, high = stats.t.interval(0.95, n - 1, loc=fmean(values), scale=stats.sem(values))
        assert interval["low"] == pytest.approx(low, rel=1e-9)
        assert interval["high"] == pytest.approx(high, rel=1e-9)
        assert interval["n"] == n


def test_the_interval_by_hand() -> None:
    # 1, 0, 1, 1, 0: mean 0.6, sample sd sqrt(0.3), t(0.975, 4) = 2.7764451052 (printed tables)
    interval = mean_interval([1, 0, 1, 1, 0])
    assert interval["mean"] == pytest.approx(0.6)
    assert interval["half_width"] == pytest.approx(2.7764451052 * math.sqrt(0.3) / math.sqrt(5), rel=1e-9)
    assert mean_interval([0.5])["low"] is None and mean_interval([])["mean"] is None


def brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """(pass@k, pass^k) by enumerating every k-subset of n samples, the first c of them correct."""
    subsets = list(itertools.combinations(range(n), k))
    any_correct = sum(any(i < c for i in subset) for subset in subsets)
    all_correct = sum(all(i < c for i in subset) for subset in subsets)
    return any_correct / len(subsets), all_correct / len(subsets)


def test_pass_at_k_and_pass_hat_k_equal_enumeration() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                at, hat = brute_force(n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(at)
                assert pass_hat_k(n, c, k) == pytest.approx(hat)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_pass_k_table_averages_tasks_up_to_the_fewest_samples() -> None:
    table = pass_k_table({"a": [True, False, True], "b": [False, False], "c": [True, True, True]})
    assert sorted(table["pass_at_k"]) == ["1", "2"]
    assert table["pass_at_k"]["2"] == pytest.approx((1 + 0 + 1) / 3)
    assert table["pass_hat_k"]["2"] == pytest.approx((1 / 3 + 0 + 1) / 3)


def test_the_summary_intervals_are_over_tasks_and_the_table_prints_them() -> None:
    # task a: 2 of 2 correct, b: 1 of 2, c: 0 of 2 -> per-task means 1, 0.5, 0
    records = [
        EpisodeRecord(task_id=task, sample=s, correct=bool(ok), turns=1)
        for task, oks in (("a", (1, 1)), ("b", (1, 0)), ("c", (0, 0)))
        for s, ok in enumerate(oks)
    ]
    summary = summarize(records)
    interval = summary["intervals"]["answer_correctness"]
    assert interval == mean_interval([1.0, 0.5, 0.0]) and interval["n"] == 3
    assert summary["answer_correctness"] == pytest.approx(0.5)
    assert summary["samples_per_task"] == 2 and summary["tasks"] == 3
    assert summary["pass_at_k"]["2"] == pytest.approx(2 / 3)
    assert summary["pass_hat_k"]["2"] == pytest.approx(1 / 3)
    table = markdown_table({"run": summary})
    assert f"| Answer correctness | 50.00 ± {100 * interval['half_width']:.2f} |" in table
    assert "| pass@2 | 66.67 |" in table and "| pass^2 | 33.33 |" in table


def test_a_stratified_sample_keeps_each_strata_share() -> None:
    strata = ["2-hop"] * 50 + ["3-hop"] * 30 + ["4-hop"] * 20
    chosen = stratified_sample(strata, 10, seed=1)
    assert Counter(strata[i] for i in chosen) == {"2-hop": 5, "3-hop": 3, "4-hop": 2}
    assert chosen == sorted(set(chosen))
    assert stratified_sample(strata, 10, seed=1) == chosen
    assert stratified_sample(strata, 10, seed=2) != chosen
    # 7 of 100: quotas 3.5, 2.1, 1.4 -> 3, 2, 1 and the one left goes to the largest remainder (2-hop)
    assert Counter(strata[i] for i in stratified_sample(strata, 7, seed=3)) == {
        "2-hop": 4,
        "3-hop": 2,
        "4-hop": 1,
    }
    for bad in (0, 101):
        with pytest.raises(ConfigError, match="--sample must be between 1 and the number of tasks"):
            stratified_sample(strata, bad, seed=0)


def test_pass_k_table_is_linear_in_the_samples_of_a_task() -> None:
    """The finding: pass@k for every k of one task with 14,000 samples took ~45 s of CPU (exact binomials
    per k); the series must take well under a second (a 100x margin on a slow machine) and agree with the
    exact estimators."""
    samples = [i % 7 == 0 for i in range(14_000)]
    started = time.process_time()
    table = pass_k_table({"task": samples})
    assert time.process_time() - started < 1.0
    n, c = len(samples), sum(samples)
    for k in (1, 2, 50, 2_000, 12_000, 14_000):
        assert table["pass_at_k"][str(k)] == pytest.approx(pass_at_k(n, c, k), abs=1e-9)
        assert table["pass_hat_k"][str(k)] == pytest.approx(pass_hat_k(n, c, k), abs=1e-9)
