"""The warm tool-call timing the sandbox benchmarks share: one small tool, warmed up, then timed."""

from __future__ import annotations

import statistics
import time

from hopgym.sandbox import Sandbox

TOOL = "def lookup(name, field='capital'):\n    return {'name': name, field: name.upper()}\n"
ARGUMENTS = {"name": "france", "field": "capital"}
WARM_UP_CALLS = 50


def time_warm_calls(sandbox: Sandbox, count: int) -> dict[str, float]:
    """Median and p90 in ms of ``count`` calls of :data:`TOOL` after :data:`WARM_UP_CALLS` untimed ones."""
    sandbox.load([TOOL])
    for _ in range(WARM_UP_CALLS):
        sandbox.call("lookup", ARGUMENTS)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        result = sandbox.call("lookup", ARGUMENTS)
        latencies.append((time.perf_counter() - started) * 1000)
        assert result.status == "ok", result
    return {"median_ms": statistics.median(latencies), "p90_ms": percentile(latencies, 0.9), "calls": count}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
