"""The warm tool-call timing the sandbox benchmarks share: one small tool, warmed up, then timed."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from hopgym.sandbox import Sandbox

TOOL = "def lookup(name, field='capital'):\n    return {'name': name, field: name.upper()}\n"
ARGUMENTS = {"name": "france", "field": "capital"}
WARM_UP_CALLS = 50


def time_warm_calls(sandbox: Sandbox, count: int) -> dict[str, float]:
    """Median and p90 in ms of ``count`` calls of :data:`TOOL` after :data:`WARM_UP_CALLS` untimed ones."""
    latencies = warm_call_latencies(sandbox, count)
    return {"median_ms": statistics.median(latencies), "p90_ms": percentile(latencies, 0.9), "calls": count}


def warm_call_latencies(sandbox: Sandbox, count: int) -> list[float]:
    """Each of ``count`` calls of :data:`TOOL` in ms, after :data:`WARM_UP_CALLS` untimed ones."""
    sandbox.load([TOOL])
    for _ in range(WARM_UP_CALLS):
        sandbox.call("lookup", ARGUMENTS)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        result = sandbox.call("lookup", ARGUMENTS)
        latencies.append((time.perf_counter() - started) * 1000)
        assert result.status == "ok", result
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def report(figures: dict[str, Any], out: str | None) -> None:
    """Print the figures as JSON and, with ``out``, write them to that file too."""
    text = json.dumps(figures, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
