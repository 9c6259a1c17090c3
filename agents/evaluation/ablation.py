"""The paper's ablations as runs of the eval runner: one run folder per arm, then the tables side by side.

- ``feedback``: the same episodes with ``feedback="detailed"`` and ``"minimal"`` (Table 5; mandatory
  scenario unless told otherwise).
- ``frameworks``: the agents ``fc``, ``react`` and ``codeact`` (Table 11; free scenario unless told).
- ``scenarios``: ``direct``, ``mandatory`` and ``free`` (Table 4's scenario columns).

Each arm is an ordinary ``hopgym eval`` folder (``OUT/<arm>``), so it resumes and reports like one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.episode_runner import EvalConfig
from hopgym.agents.evaluation.feedback_flips import feedback_flips
from hopgym.agents.evaluation.records import EPISODES_FILE, read_episodes
from hopgym.agents.evaluation.runner import EvalRun
from hopgym.agents.evaluation.summary import markdown_table
from hopgym.errors import ConfigError


@dataclass(frozen=True)
class Ablation:
    """Which setting varies (an env kwarg or the agent), its values, and the defaults the paper used."""

    setting: str
    arms: tuple[str, ...]
    defaults: Mapping[str, Any]


ABLATIONS = {
    "feedback": Ablation("feedback", ("detailed", "minimal"), {"scenario": "mandatory"}),
    "frameworks": Ablation("agent", ("fc", "react", "codeact"), {"scenario": "free"}),
    "scenarios": Ablation("scenario", ("direct", "mandatory", "free"), {}),
}


def arm_configs(name: str, base: EvalConfig) -> dict[str, EvalConfig]:
    """One eval config per arm, in ``base.out / arm``; the varied setting must not be fixed in ``base``."""
    if name not in ABLATIONS:
        raise ConfigError(f"unknown ablation {name!r}; valid: {', '.join(ABLATIONS)}")
    ablation = ABLATIONS[name]
    if ablation.setting in base.env_kwargs:
        raise ConfigError(f"the {name} ablation varies {ablation.setting}; do not set it")
    configs = {}
    for arm in ablation.arms:
        env_kwargs = {**ablation.defaults, **base.env_kwargs}
        changes: dict[str, Any] = {"out": Path(base.out) / arm}
        if ablation.setting == "agent":
            changes["agent"] = arm
        else:
            env_kwargs[ablation.setting] = arm
        configs[arm] = dataclasses.replace(base, env_kwargs=env_kwargs, **changes)
    return configs


def run_ablation(name: str, base: EvalConfig) -> dict[str, dict[str, Any]]:
    """Run (or resume) every arm one after another; return each arm's summary."""
    return {arm: EvalRun(config).run() for arm, config in arm_configs(name, base).items()}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


def table5_markdown(detailed: Path, minimal: Path, error_set: str = "invocation") -> str:
    """Table 5 from two run folders (detailed and minimal feedback)."""
    flips = feedback_flips(
        read_episodes(detailed / EPISODES_FILE), read_episodes(minimal / EPISODES_FILE), error_set
    )
    rates = flips.table5()
    return "\n".join(
        [
            "| Queries with errors | w/ Feedback | w/o Feedback | ΔC→I | ΔI→C |",
            "|---:|---:|---:|---:|---:|",
            f"| {flips.queries} | {_pct(rates['with_feedback'])} | {_pct(rates['without_feedback'])} | "
            f"{_pct(rates['delta_c_to_i'])} | {_pct(rates['delta_i_to_c'])} |",
            "",
            f"Queries: episodes whose detailed-feedback run made a call with an error ({error_set}); "
            f"{flips.unpaired} task(s) left out (missing from the other run or ended in a runner error).",
        ]
    )


def table11_markdown(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """Table 11: answer correctness per framework, one row."""
    names = list(summaries)
    return "\n".join(
        [
            "| " + " | ".join(name.upper() if name == "fc" else name for name in names) + " |",
            "|" + "---:|" * len(names),
            "| " + " | ".join(_pct(summaries[name].get("answer_correctness")) for name in names) + " |",
        ]
    )


def ablation_markdown(
    name: str, out: Path, summaries: Mapping[str, Mapping[str, Any]], error_set: str = "invocation"
) -> str:
    """The ablation's own table (Table 5 or 11) and the Table 4 columns of every arm side by side."""
    sections = [f"# Ablation: {name}", ""]
    if name == "feedback":
        sections += ["## Table 5: correctness on queries with erroneous calls", "",
                     table5_markdown(out / "detailed", out / "minimal", error_set), ""]  # fmt: skip
    if name == "frameworks":
        sections += ["## Table 11: answer correctness by framework", "", table11_markdown(summaries), ""]
    sections += ["## Table 4 columns per arm", "", markdown_table(summaries), ""]
    return "\n".join(sections)
