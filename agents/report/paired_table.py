"""The Markdown of a paired comparison (:func:`hopgym.agents.evaluation.pairing.compare_runs`): what was
paired and dropped, then one row per metric, fractions shown ×100 as in the report's tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopgym.agents.evaluation.pairing import HEADLINE

TESTS = {"mcnemar": "McNemar exact", "sign_flip": "sign-flip permutation"}


def _label(key: str) -> str:
    """A metric's row label; a ``|`` in a name read from a run folder cannot split the row."""
    return "Answer correctness" if key == HEADLINE else key.replace("_", " ").replace("|", "\\|")


def _pct(value: float | None, sign: str = "") -> str:
    return "–" if value is None else f"{100 * value:{sign}.2f}"


def _row(key: str, metric: Mapping[str, Any]) -> str:
    interval = "–" if metric["low"] is None else f"[{_pct(metric['low'])}, {_pct(metric['high'])}]"
    test = TESTS[metric["test"]]
    if metric["test"] == "mcnemar":
        test += f" (A only {metric['a_only']}, B only {metric['b_only']})"
    cells = [
        _label(key), str(metric["n"]), _pct(metric["a"]), _pct(metric["b"]), _pct(metric["difference"], "+"),
        interval, test, f"{metric['p_value']:.4g}",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def paired_markdown(comparison: Mapping[str, Any], name_a: str, name_b: str) -> str:
    """The comparison of run B (``name_b``) against run A (``name_a``) as Markdown."""
    tasks, errored = comparison["tasks"], comparison["errored_episodes"]
    interval = comparison["interval"]
    lines = [
        f"Paired comparison on the tasks both runs hold: B − A, A = {name_a}, B = {name_b}",
        "",
        f"Tasks paired: {tasks['paired']}; dropped: {tasks['only_in_a']} only in A, "
        f"{tasks['only_in_b']} only in B, {tasks['errored']} errored (every episode of the task ended "
        f"with an error in one run). Episodes left out for their error: A {errored['a']}, B {errored['b']}.",
        "",
        f"| Metric | n | A | B | B − A | {100 * interval['confidence']:.0f}% interval | Test | p |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
        *(_row(key, metric) for key, metric in comparison["metrics"].items()),
        "",
        f"Values in %, per task (samples of a task averaged); interval: {interval['method']} "
        f"({interval['resamples']:,} resamples, seed {interval['seed']}).",
    ]
    needed = comparison.get("tasks_needed")
    if needed:
        interval_n, power_n = needed["interval_excludes_0"], needed["mcnemar_power_80"]
        if interval_n is None:
            lines.append("No number of tasks tells the runs apart: they are right on as many tasks each.")
        else:
            power = "over 100,000" if power_n is None else f"{power_n:,}"
            lines.append(
                f"At these discordant rates, a 95% interval is expected to exclude 0 from {interval_n:,} "
                f"paired tasks; McNemar at alpha 0.05 has 80% power from {power}."
            )
    return "\n".join(lines)
