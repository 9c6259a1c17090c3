"""A run's summary from its episode records: the paper's Table 4 columns plus runner-level rates.

The Table 4 numbers come from the env layer's ``table4_metrics`` (one definition for the whole project);
this module adds what the runner knows (parallel calls, turns, tokens, protocol failures, errors) and the
mean of each per-episode ``metrics`` value an env reports (e.g. FamilyTool's), under the same keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

from hopgym.envs.metrics import INVOCATION_ERROR_TYPES, table4_metrics

# (label, key, kind): "pct" values are fractions shown ×100, "num" and "text" values are shown as they are.
TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("Protocol", "protocol", "text"),
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
    ("Prompt tokens", "prompt_tokens", "num"),
    ("Completion tokens", "completion_tokens", "num"),
)


def run_protocol(records: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str | None:
    """The protocol the episodes ran under (ToolHop-v0: ``official`` or ``hopgym``), from the records,
    else from the run's env kwargs; several are joined with "+"; None for envs without one."""
    found = sorted({str(r["protocol"]) for r in records if r.get("protocol")})
    if found:
        return "+".join(found)
    protocol = (run.get("env_kwargs") or {}).get("protocol")
    return str(protocol) if protocol else None


def _episode_metric_means(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for record in records:
        for key, value in (record.get("metrics") or {}).items():
            if isinstance(value, (int, float)):  # bools count as 0/1; None (not applicable) is skipped
                values.setdefault(key, []).append(float(value))
    return {key: fmean(items) for key, items in values.items()}


def summarize(records: Iterable[Mapping[str, Any]], run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary.json content for these episode records."""
    records = list(records)
    count = len(records)
    agent_stats = [record.get("agent") or {} for record in records]
    summary: dict[str, Any] = {
        "run": dict(run or {}),
        "protocol": run_protocol(records, run or {}),
        **table4_metrics(records),
    }
    summary.update(
        errors=sum(record.get("error") is not None for record in records),
        parallel_call_rate=(sum(bool(r.get("parallel_turns")) for r in records) / count) if count else None,
        mean_turns=fmean(r.get("turns", 0) for r in records) if count else None,
        mean_calls=fmean(len(r.get("calls") or ()) for r in records) if count else None,
        parse_failures=sum(stats.get("parse_failures", 0) for stats in agent_stats),
        parse_failure_episodes=sum(bool(stats.get("gave_up_parsing")) for stats in agent_stats),
        raw_json_tool_calls=sum(stats.get("raw_json_tool_calls", 0) for stats in agent_stats),
        prompt_tokens=sum(stats.get("prompt_tokens", 0) for stats in agent_stats),
        completion_tokens=sum(stats.get("completion_tokens", 0) for stats in agent_stats),
    )
    episode_metrics = _episode_metric_means(records)
    summary.update(episode_metrics, episode_metrics=sorted(episode_metrics))
    return summary


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{100 * value:.2f}"
    if kind == "text":
        return str(value)
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def markdown_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One column per run (name → summary); fractions print ×100. Env-specific metrics get rows too."""
    names = list(summaries)
    known = {key for _, key, _ in TABLE_ROWS}
    extra = sorted({key for s in summaries.values() for key in s.get("episode_metrics", ())} - known)
    rows = [*TABLE_ROWS, *((key.replace("_", " "), key, "pct") for key in extra)]
    lines = [
        "| Metric | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, key, kind in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(summaries[n].get(key), kind) for n in names) + " |")
    return "\n".join(lines)


def run_title(summary: Mapping[str, Any]) -> str:
    """A short description of what was run, for table headers."""
    run = summary.get("run") or {}
    env_kwargs = run.get("env_kwargs") or {}
    protocol = summary.get("protocol")
    parts = [
        run.get("env"),
        f"{protocol} protocol" if protocol else None,
        run.get("agent"),
        run.get("model"),
        env_kwargs.get("scenario"),
        env_kwargs.get("feedback"),
    ]
    return " · ".join(str(part) for part in parts if part)
