"""The paired comparison's statistics against reference computations: McNemar's exact p from a hand-computed
2x2 table (scipy's binomtest and a sum over the binomial pmf written out here), the bootstrap interval
against a bootstrap done here, the sign-flip test against all 2^n sign patterns, the pairing's dropped
tasks, and the power helpers against brute-force enumeration and Connor's (1987) approximation."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest

from hopgym.agents.evaluation.records import EpisodeRecord
from tests.doc_blocks import doc_block
from tests.extras import require_extra

require_extra("scipy", "report")

from scipy import stats  # noqa: E402

from hopgym.agents.evaluation import paired_stats  # noqa: E402
from hopgym.agents.evaluation.pairing import compare_metric, compare_runs, pair_runs  # noqa: E402
from hopgym.errors import ConfigError, DataError  # noqa: E402


def episode(task: str, correct: bool, sample: int = 0, error: str | None = None, **metrics: float | None):
    return EpisodeRecord(
        task_id=task, sample=sample, correct=correct, error=error, metrics=dict(metrics) if metrics else None
    )


def table_runs(both: int, a_only: int, b_only: int, neither: int) -> tuple[list[EpisodeRecord], ...]:
    """Two runs over the same tasks with this 2x2 table of answer correctness."""
    cells = [(True, True)] * both + [(True, False)] * a_only + [(False, True)] * b_only
    cells += [(False, False)] * neither
    a = [episode(f"t{i}", right_a) for i, (right_a, _) in enumerate(cells)]
    b = [episode(f"t{i}", right_b) for i, (_, right_b) in enumerate(cells)]
    return a, b


def reference_bootstrap(differences: Sequence[float], seed: int = 12345) -> tuple[float, float]:
    """A percentile bootstrap written out: 20,000 resamples of the tasks, another generator and seed."""
    values = np.asarray(differences)
    rng = np.random.default_rng(seed)
    means = [values[rng.integers(0, len(values), len(values))].mean() for _ in range(20_000)]
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def test_mcnemar_of_a_hand_computed_table() -> None:
    # 20 tasks both right, 9 only A, 2 only B, 19 neither: A 29/50, B 22/50, B - A = -7/50.
    a, b = table_runs(both=20, a_only=9, b_only=2, neither=19)
    result = compare_runs(a, b)
    correctness = result["metrics"]["answer_correctness"]
    # Two-sided exact binomial test of 2 among 11 discordant pairs at 1/2: the outcomes no likelier than 2
    # (0, 1, 2 and 9, 10, 11) sum to 2 (C(11,0) + C(11,1) + C(11,2)) / 2^11 = 134 / 2048.
    by_hand = sum(math.comb(11, k) for k in range(12) if math.comb(11, k) <= math.comb(11, 2)) / 2**11
    assert by_hand == 134 / 2048
    assert correctness["p_value"] == pytest.approx(by_hand, rel=1e-12)
    assert correctness["p_value"] == pytest.approx(stats.binomtest(2, 11, 0.5).pvalue, rel=1e-12)
    assert (correctness["test"], correctness["a_only"], correctness["b_only"]) == ("mcnemar", 9, 2)
    assert (correctness["n"], correctness["a"], correctness["b"]) == (50, 29 / 50, 22 / 50)
    assert correctness["difference"] == pytest.approx(-7 / 50)
    low, high = reference_bootstrap([-1.0] * 9 + [1.0] * 2 + [0.0] * 39)
    assert correctness["low"] == pytest.approx(low, abs=0.021) and correctness["high"] == pytest.approx(
        high, abs=0.021
    )
    assert correctness["low"] < -7 / 50 < correctness["high"] < 0  # B is worse, the interval says so
    assert compare_runs(a, b) == result  # seeded: the same runs give the same numbers
    assert result["tasks"] == {"paired": 50, "only_in_a": 0, "only_in_b": 0, "errored": 0}


def test_mcnemar_without_discordant_pairs_and_the_swap_of_runs() -> None:
    a, b = table_runs(both=3, a_only=0, b_only=0, neither=2)
    same = compare_runs(a, b)["metrics"]["answer_correctness"]
    assert (same["p_value"], same["difference"], same["low"], same["high"]) == (1.0, 0.0, 0.0, 0.0)
    a, b = table_runs(both=10, a_only=1, b_only=7, neither=12)
    forward, backward = compare_runs(a, b), compare_runs(b, a)
    ab, ba = forward["metrics"]["answer_correctness"], backward["metrics"]["answer_correctness"]
    assert ab["p_value"] == ba["p_value"] == pytest.approx(stats.binomtest(7, 8).pvalue)
    assert ab["difference"] == -ba["difference"] == pytest.approx(6 / 30)
    assert forward["tasks_needed"]["interval_excludes_0"] == paired_stats.tasks_for_interval(1 / 30, 7 / 30)


def test_pairing_counts_the_dropped_tasks_and_averages_samples() -> None:
    a = [
        episode("only-a-1", True),
        episode("only-a-2", False),
        episode("errored-in-a", True, error="ModelError: HTTP 500"),
        episode("kept", True),
        episode("two-samples", True),
        episode("two-samples", False, sample=1),
        episode("plain", False),
    ]
    b = [
        episode("errored-in-a", True),
        episode("kept", False),
        episode("kept", True, sample=1, error="SandboxError: gone"),  # left out; sample 0 still pairs
        episode("two-samples", True),
        episode("two-samples", True, sample=1),
        episode("plain", True),
        episode("only-b", True),
    ]
    paired = pair_runs(a, b)
    assert (paired.tasks, paired.only_in_a, paired.only_in_b, paired.errored) == (3, 2, 1, 1)
    assert paired.errored_episodes == (1, 1)
    # Tasks in A's order: kept, two-samples, plain; two-samples averages A's samples to 0.5.
    assert paired.values["answer_correctness"] == ([1.0, 0.5, 0.0], [0.0, 1.0, 1.0])
    result = compare_runs(a, b)
    correctness = result["metrics"]["answer_correctness"]
    assert correctness["test"] == "sign_flip"  # 0.5 is not binary
    assert correctness["p_value"] == pytest.approx(exact_sign_flip_p([-1.0, 0.5, 1.0]))
    assert result["tasks"] == {"paired": 3, "only_in_a": 2, "only_in_b": 1, "errored": 1}
    assert result["errored_episodes"] == {"a": 1, "b": 1}


def exact_sign_flip_p(differences: Sequence[float]) -> float:
    """Two-sided sign-flip p over every sign pattern: twice the smaller tail (as scipy defines it), <= 1."""
    observed = sum(differences) / len(differences)
    means = [
        sum(s * d for s, d in zip(signs, differences, strict=True)) / len(differences)
        for signs in itertools.product((1, -1), repeat=len(differences))
    ]
    tolerance = 1e-12
    greater = sum(m >= observed - tolerance for m in means) / len(means)
    less = sum(m <= observed + tolerance for m in means) / len(means)
    return min(1.0, 2 * min(greater, less))


def test_a_continuous_metric_gets_the_sign_flip_test_over_the_tasks_that_recorded_it() -> None:
    f1_a = [0.2, 0.5, 0.0, 1.0, 0.4, 0.25]
    f1_b = [0.6, 0.5, 0.5, 1.0, 0.9, 0.75]
    a = [episode(f"t{i}", False, f1=v) for i, v in enumerate(f1_a)]
    b = [episode(f"t{i}", False, f1=v) for i, v in enumerate(f1_b)]
    a.append(episode("t6", True, f1=None))  # not applicable in A: t6 pairs for correctness only
    b.append(episode("t6", True, f1=0.3))
    a.append(episode("t7", False))  # did not end (no metrics): correctness only
    b.append(episode("t7", False, f1=1.0))
    result = compare_runs(a, b)
    f1 = result["metrics"]["f1"]
    differences = [vb - va for va, vb in zip(f1_a, f1_b, strict=True)]
    assert f1["n"] == 6 and result["metrics"]["answer_correctness"]["n"] == 8
    assert f1["test"] == "sign_flip" and "a_only" not in f1
    assert f1["difference"] == pytest.approx(sum(differences) / 6)
    assert f1["p_value"] == pytest.approx(exact_sign_flip_p(differences))  # 64 patterns: scipy enumerates
    low, high = reference_bootstrap(differences)
    assert f1["low"] == pytest.approx(low, abs=0.02) and f1["high"] == pytest.approx(high, abs=0.02)
    assert list(result["metrics"]) == ["answer_correctness", "f1"]


def test_on_binary_values_the_sign_flip_test_is_mcnemars() -> None:
    differences = [1.0] * 7 + [-1.0] * 2 + [0.0] * 3  # 2^12 patterns: exact
    assert paired_stats.sign_flip_p(differences) == pytest.approx(paired_stats.mcnemar_exact(2, 7))
    binary = compare_metric([0.0] * 7 + [1.0] * 2 + [1.0] * 3, [1.0] * 7 + [0.0] * 2 + [1.0] * 3)
    assert binary["test"] == "mcnemar" and binary["p_value"] == pytest.approx(stats.binomtest(7, 9).pvalue)


def test_one_task_gives_no_interval_and_no_evidence() -> None:
    one = compare_metric([0.25], [0.75])
    assert (one["difference"], one["low"], one["high"], one["p_value"]) == (0.5, None, None, 1.0)


def test_runs_without_a_shared_task_are_refused_naming_why() -> None:
    a = [episode("x", True), episode("y", True, error="ModelError: down")]
    b = [episode("z", True), episode("y", True)]
    with pytest.raises(DataError, match="no task can be paired: 1 only in A, 1 only in B, 1 with every"):
        compare_runs(a, b)


def test_without_scipy_the_comparison_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # import scipy.stats raises ImportError
    a, b = table_runs(both=1, a_only=1, b_only=0, neither=1)
    with pytest.raises(ConfigError, match=r"needs scipy: pip install 'hopgym\[report\]'"):
        compare_runs(a, b)


def test_bad_counts_and_rates_are_refused() -> None:
    with pytest.raises(ValueError, match="discordant counts must be >= 0"):
        paired_stats.mcnemar_exact(-1, 3)
    with pytest.raises(ValueError, match="sum to at most 1"):
        paired_stats.tasks_for_power(0.7, 0.4)
    with pytest.raises(ValueError, match=r"no two runs of accuracies 0\.1 and 0\.9 have correlation 0\.9"):
        paired_stats.discordant_rates(0.1, 0.9, 0.9)
    with pytest.raises(ValueError, match="accuracy_b must be a fraction"):
        paired_stats.discordant_rates(0.5, 1.5, 0.0)


# -- how many paired tasks ----------------------------------------------------------------------------


def brute_force_power(n: int, a_only: float, b_only: float, alpha: float = 0.05) -> float:
    """Exact McNemar power by enumerating every (A only, B only) count of n tasks (multinomial)."""
    concordant = 1 - a_only - b_only
    power = 0.0
    for x in range(n + 1):
        for y in range(n + 1 - x):
            if x + y and stats.binomtest(y, x + y, 0.5).pvalue <= alpha:
                ways = math.factorial(n) / (math.factorial(x) * math.factorial(y) * math.factorial(n - x - y))
                power += ways * a_only**x * b_only**y * concordant ** (n - x - y)
    return power


@pytest.mark.parametrize(("n", "a_only", "b_only"), [(20, 0.1, 0.35), (33, 0.05, 0.15), (12, 0.4, 0.0)])
def test_mcnemar_power_equals_the_enumeration_of_every_outcome(n: int, a_only: float, b_only: float) -> None:
    assert paired_stats.mcnemar_power(n, a_only, b_only) == pytest.approx(
        brute_force_power(n, a_only, b_only), rel=1e-9
    )


@pytest.mark.parametrize(("a_only", "b_only"), [(0.05, 0.15), (0.1, 0.35), (0.0, 0.5), (0.4, 0.0)])
def test_tasks_for_power_is_the_first_n_reaching_it(a_only: float, b_only: float) -> None:
    n = paired_stats.tasks_for_power(a_only, b_only)
    assert n is not None
    assert paired_stats.mcnemar_power(n, a_only, b_only) >= 0.8
    assert all(paired_stats.mcnemar_power(m, a_only, b_only) < 0.8 for m in range(1, n))


def test_tasks_for_power_is_near_connors_approximation() -> None:
    n = paired_stats.tasks_for_power(0.05, 0.15)
    assert n is not None
    # Connor (1987): n = (z_{a/2} sqrt(psi) + z_b sqrt(psi - delta^2))^2 / delta^2, psi = 0.2, delta = 0.1,
    # z from printed tables: (1.959964 * 0.447214 + 0.841621 * 0.435890)^2 / 0.01 = 154.6. The exact test is
    # conservative (its level is below 0.05), so it needs a few more tasks.
    connor = (1.959964 * math.sqrt(0.2) + 0.841621 * math.sqrt(0.19)) ** 2 / 0.01
    assert connor == pytest.approx(154.6, abs=0.05)
    assert connor <= n <= 1.12 * connor
    assert paired_stats.tasks_for_power(0.1, 0.1) is None
    assert paired_stats.tasks_for_power(0.10, 0.11, most=500) is None  # needs ~15,000 tasks


def test_tasks_for_interval_by_hand_and_from_accuracies_and_correlation() -> None:
    # z = 1.959964; per-task difference variance 0.2 - 0.1^2 = 0.19: 1.959964^2 * 0.19 / 0.01 = 72.99.
    assert paired_stats.tasks_for_interval(0.05, 0.15) == 73
    assert paired_stats.tasks_for_interval(0.2, 0.2) is None
    # Independent runs (correlation 0) right 60% and 70%: both right 42%, only A 18%, only B 28%.
    assert paired_stats.discordant_rates(0.6, 0.7, 0.0) == pytest.approx((0.18, 0.28))
    # Correlation 0.5 adds 0.5 * sqrt(0.24 * 0.21) = 0.11225 to both-right, taken from each discordant cell.
    assert paired_stats.discordant_rates(0.6, 0.7, 0.5) == pytest.approx((0.06775, 0.16775), abs=1e-5)


def test_the_docs_power_example_prints_what_these_helpers_give() -> None:
    block = doc_block("paired-power")
    done = subprocess.run([sys.executable, "-c", block.text], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rates = paired_stats.discordant_rates(0.6, 0.7, 0.5)
    assert done.stdout.split("\n") == ["73 168", str(paired_stats.tasks_for_power(*rates)), ""]
