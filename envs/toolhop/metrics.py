"""The paper's Table 4 columns from episode records: answer correctness and invocation errors.

Invocation errors follow Section 4.1: tool hallucination, parameter hallucination and parameter missing,
counted per query (episodes with at least one such call / all episodes) and per call instance
(calls with at least one such error / all calls). A call may carry several types; each type column
counts it, the overall column counts it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hopgym.envs.calls import INVOCATION_ERROR_TYPES, call_error_types


def _rate(count: int, total: int) -> float | None:
    return count / total if total else None


def table4_metrics(episodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Fractions (0-1) keyed ``answer_correctness``, ``invocation_error_{query,instance}`` and
    ``{type}_{query,instance}`` for each invocation error type, plus the counts they come from.

    Each record needs ``correct`` (bool) and ``calls`` (the env's call records: ``status``, ``errors``).
    A rate over zero episodes or zero calls is ``None``.
    """
    records: Sequence[Mapping[str, Any]] = list(episodes)
    calls = [call for record in records for call in record.get("calls") or ()]
    per_call = [call_error_types(call) for call in calls]
    per_query = [
        set().union(*(call_error_types(call) for call in record.get("calls") or ())) for record in records
    ]
    metrics: dict[str, Any] = {
        "episodes": len(records),
        "calls": len(calls),
        "answer_correctness": _rate(sum(bool(r.get("correct")) for r in records), len(records)),
        "invocation_error_query": _rate(sum(bool(errors) for errors in per_query), len(records)),
        "invocation_error_instance": _rate(sum(bool(errors) for errors in per_call), len(calls)),
    }
    for error_type in INVOCATION_ERROR_TYPES:
        metrics[f"{error_type}_query"] = _rate(sum(error_type in e for e in per_query), len(records))
        metrics[f"{error_type}_instance"] = _rate(sum(error_type in e for e in per_call), len(calls))
    return metrics
