"""A run's summary from its episode records: the paper's Table 4 columns plus runner-level rates.

The Table 4 numbers come from the env layer's ``table4_metrics`` (one definition for the whole project);
this module adds what the runner knows (parallel calls, turns, tokens, protocol failures, errors) and the
mean of each per-episode ``metrics`` value an env reports (e.g. FamilyTool's), under the same keys.

Every per-episode headline metric also gets a 95% interval (``intervals``, over tasks: see
:mod:`hopgym.agents.evaluation.stats`), and with several samples per task pass@k and pass^k.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

from hopgym.agents.evaluation.records import AGENT_COUNTS, EpisodeRecord
from hopgym.agents.evaluation.stats import mean_interval, pass_k_table, per_task_means
from hopgym.agents.model.cost import token_cost
from hopgym.envs.calls import INVOCATION_ERROR_TYPES, call_error_types
from hopgym.envs.toolhop.metrics import table4_metrics

# (label, key, kind): "pct" values are fractions shown ×100, "usd" dollars to the micro-dollar, "num"
# values as they are.
TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Answer correctness", "answer_correctness", "pct"),
    ("Invocation error, query", "invocation_error_query", "pct"),
    ("Invocation error, instance", "invocation_error_instance", "pct"),
    *(
        (f"{kind.replace('_', ' ').capitalize()}, {level}", f"{kind}_{level}", "pct")
        for kind in INVOCATION_ERROR_TYPES
        for level in ("query", "instance")
    ),
    ("Parallel-call rate (queries)", "parallel_call_rate", "pct"),
    ("Mean turns", "mean_turns", "num"),
    ("Mean tool calls", "mean_calls", "num"),
    ("Episodes", "episodes", "num"),
    ("Episodes with errors", "errors", "num"),
    ("Protocol parse failures", "parse_failures", "num"),
    ("Tool calls recovered from text", "raw_json_tool_calls", "num"),
    ("Replies cut off by max tokens", "cut_off_replies", "num"),
    ("Prompt tokens", "prompt_tokens", "num"),
    ("Completion tokens", "completion_tokens", "num"),
    ("Cost (USD, litellm price map)", "cost_usd", "usd"),
)


def episode_values(record: EpisodeRecord) -> dict[str, float]:
    """The per-episode value behind each headline metric whose summary value is a mean over episodes."""
    errors = set().union(*(call_error_types(call) for call in record.calls))
    values = {
        "answer_correctness": float(record.correct),
        "invocation_error_query": float(bool(errors)),
        **{f"{kind}_query": float(kind in errors) for kind in INVOCATION_ERROR_TYPES},
        "parallel_call_rate": float(bool(record.parallel_turns)),
        "mean_turns": float(record.turns),
        "mean_calls": float(len(record.calls)),
    }
    for key, value in (record.metrics or {}).items():
        if isinstance(value, (int, float)):  # as in _episode_metric_means: None is not applicable
            values[key] = float(value)
    return values


def table4(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """The env layer's Table 4 columns (:func:`table4_metrics`) of these records."""
    return table4_metrics({"correct": record.correct, "calls": record.calls} for record in records)


def metric_intervals(records: Sequence[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """A 95% interval for every per-episode metric, over per-task means (samples of a task averaged)."""
    pairs: dict[str, list[tuple[str, float]]] = {}
    for record in records:
        for key, value in episode_values(record).items():
            pairs.setdefault(key, []).append((record.task_id, value))
    return {key: mean_interval(per_task_means(items)) for key, items in pairs.items()}


def sample_statistics(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Tasks, samples per task (the fewest), pass@k and pass^k for every k up to it."""
    by_task: dict[str, list[bool]] = {}
    for record in records:
        by_task.setdefault(record.task_id, []).append(record.correct)
    return {
        "tasks": len(by_task),
        "samples_per_task": min((len(v) for v in by_task.values()), default=0),
        **pass_k_table(by_task),
    }


def _episode_metric_means(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for record in records:
        for key, value in (record.metrics or {}).items():
            if isinstance(value, (int, float)):  # bools count as 0/1; None (not applicable) is skipped
                values.setdefault(key, []).append(float(value))
    return {key: fmean(items) for key, items in values.items()}


def summarize(records: Iterable[EpisodeRecord], run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary.json content for these episode records."""
    records = list(records)
    count = len(records)
    summary: dict[str, Any] = {"run": dict(run or {}), **table4(records)}
    summary.update(
        errors=sum(record.error is not None for record in records),
        parallel_call_rate=(sum(bool(r.parallel_turns) for r in records) / count) if count else None,
        mean_turns=fmean(r.turns for r in records) if count else None,
        mean_calls=fmean(len(r.calls) for r in records) if count else None,
        parse_failure_episodes=sum(bool(r.agent_count("gave_up_parsing")) for r in records),
        **{name: sum(r.agent_count(name) for r in records) for name in AGENT_COUNTS},
    )
    episode_metrics = _episode_metric_means(records)
    summary.update(episode_metrics, episode_metrics=sorted(episode_metrics))
    summary.update(sample_statistics(records), intervals=metric_intervals(records))
    summary["cost_usd"] = token_cost(
        (run or {}).get("model"), summary["prompt_tokens"], summary["completion_tokens"]
    )
    return summary


def _cell(value: Any, kind: str, interval: Mapping[str, Any] | None = None) -> str:
    if value is None:
        return "–"
    if kind == "pct":
        half = (interval or {}).get("half_width")
        return f"{100 * value:.2f}" + (f" ± {100 * half:.2f}" if half is not None else "")
    if kind == "usd":
        return f"{value:.6f}"
    if isinstance(value, float):
        half = (interval or {}).get("half_width")
        return f"{value:.2f}" + (f" ± {half:.2f}" if half is not None else "")
    return str(value)


def markdown_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One column per run (name → summary); fractions print ×100, with ± the 95% interval's half-width
    where the summary has one. Env-specific metrics and pass@k / pass^k (k > 1) get rows too."""
    names = list(summaries)
    known = {key for _, key, _ in TABLE_ROWS}
    extra = sorted({key for s in summaries.values() for key in s.get("episode_metrics", ())} - known)
    rows = [*TABLE_ROWS, *((key.replace("_", " "), key, "pct") for key in extra)]
    ks = sorted({int(k) for s in summaries.values() for k in s.get("pass_at_k", {}) if int(k) > 1})
    rows += [(f"{name}{k}", f"{key}.{k}", "pct") for k in ks for name, key in _PASS_ROWS]
    lines = [
        "| Metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, key, kind in rows:
        cells = (
            _cell(_value(summaries[n], key), kind, summaries[n].get("intervals", {}).get(key)) for n in names
        )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_PASS_ROWS = (("pass@", "pass_at_k"), ("pass^", "pass_hat_k"))


def _value(summary: Mapping[str, Any], key: str) -> Any:
    """``summary[key]``, or ``summary[outer][inner]`` for a dotted key such as ``pass_at_k.2``."""
    outer, _, inner = key.partition(".")
    return (summary.get(outer) or {}).get(inner) if inner else summary.get(key)


def feedback_applies(settings: Mapping[str, Any]) -> bool:
    """Whether a run's feedback mode means anything: the direct scenario offers no tool, so no call of
    it ever gets feedback."""
    return settings.get("scenario") != "direct"


def run_title(summary: Mapping[str, Any]) -> str:
    """A short description of what was run, for table headers: the env and the settings of it that the run
    names (ToolHop's protocol, given or as the env reported it in the provenance, its scenario and
    feedback), the agent and the model."""
    run = summary.get("run") or {}
    env_kwargs = run.get("env_kwargs") or {}
    protocol = env_kwargs.get("protocol") or (run.get("provenance") or {}).get("protocol")
    parts = [
        run.get("env"),
        f"{protocol} protocol" if protocol else None,
        run.get("agent"),
        run.get("model"),
        env_kwargs.get("scenario"),
        env_kwargs.get("feedback") if feedback_applies(env_kwargs) else None,
    ]
    return " · ".join(str(part) for part in parts if part)
