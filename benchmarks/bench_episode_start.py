"""Episode start, ``start="spawn"`` against ``start="fork"``, in one run on the real ToolHop subset.

For each start mode: ``env.reset`` (reset -> first call possible: the episode's worker is loaded) median
and p90, with 50 ms of other episode work between resets and back to back; CPU per episode (every process
the env starts, counted by a cpuacct cgroup of this benchmark, root and cgroup v1 only; else the host's own
and reaped children's CPU); the full 100-task pass (reset + one call per offered tool, as ``bench_env.py``)
and the warm ``env.step`` round trip; a warm call back to back and after the same 50 ms pause (what the
machine adds to any round trip after idle cores). Ratios fork/spawn are from the same run (the machine is
shared: compare ratios, not runs).

Usage: ``HOPGYM_DATA=../shared/data python benchmarks/bench_episode_start.py [--resets N] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from _timing import ARGUMENTS, TOOL, percentile
from bench_env import full_pass, warm_round_trip

from hopgym.envs.toolhop.env import ToolHopEnv

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
EPISODE_SECONDS = 0.05
"""The rest of an episode between two resets in the first series (a short agent turn)."""


class CpuMeter:
    """CPU seconds used by this process and everything it starts (forked workers included, which are not
    this process's children): a cpuacct group this process joins, where one exists."""

    def __init__(self) -> None:
        self.group = CPUACCT / f"hopgym-bench-{os.getpid()}"
        try:
            self.group.mkdir()
            (self.group / "cgroup.procs").write_text(str(os.getpid()))
            self.source = "cpuacct cgroup (all processes)"
        except OSError:
            self.group = None
            self.source = "getrusage self+children (forked workers not counted)"

    def seconds(self) -> float:
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        return sum(item.ru_utime + item.ru_stime for item in usage)

    def close(self, patience: float = 5.0) -> None:
        """Leave the group and remove it once the env's last processes (exiting after its close) are gone."""
        if self.group is None:
            return
        (self.group.parent / "cgroup.procs").write_text(str(os.getpid()))
        give_up = time.monotonic() + patience
        while True:
            try:
                self.group.rmdir()
                return
            except OSError:  # EBUSY: a killed worker still exiting, or not yet reaped
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.01)


def resets(env: ToolHopEnv, count: int, meter: CpuMeter, episode_seconds: float) -> dict[str, Any]:
    """``count`` resets, each followed by ``episode_seconds`` of the episode's other work (model calls),
    during which the pool refills; 0: back to back, where the spare's start bounds the rate."""
    latencies = []
    cpu_started = meter.seconds()
    for index in range(count):
        started = time.perf_counter()
        env.reset(options={"index": index % len(env.tasks)})
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(episode_seconds)
    cpu = meter.seconds() - cpu_started
    return {
        "resets": count,
        "episode_seconds": episode_seconds,
        "median_ms": statistics.median(latencies),
        "p90_ms": percentile(latencies, 0.9),
        "cpu_ms_per_episode": cpu * 1000 / count,
    }


def calls_after_pauses(env: ToolHopEnv, count: int, pause: float) -> dict[str, float]:
    """The same warm sandbox call back to back and ``pause`` seconds after the previous one (medians, ms):
    the second pays what any round trip pays after the cores were idle (a reset's two hand-overs too)."""
    assert env.sandbox is not None
    env.sandbox.load([TOOL])
    medians = {}
    for name, seconds in (("back_to_back_ms", 0.0), ("after_pause_ms", pause)):
        latencies = []
        for _ in range(count):
            time.sleep(seconds)
            started = time.perf_counter()
            env.sandbox.call("lookup", ARGUMENTS)
            latencies.append((time.perf_counter() - started) * 1000)
        medians[name] = statistics.median(latencies)
    return medians


def measure(start: str, resets_count: int, calls: int, meter: CpuMeter, data: str | None) -> dict[str, Any]:
    env = ToolHopEnv(data_path=data, max_turns=10**9, sandbox_options={"start": start})
    try:
        env.sandbox.wait_until_warm()
        result: dict[str, Any] = {"isolation": env.sandbox.isolation}
        result["reset"] = resets(env, resets_count, meter, EPISODE_SECONDS)
        result["reset_back_to_back"] = resets(env, resets_count, meter, 0.0)
        cpu_started = meter.seconds()
        result["full_pass"] = full_pass(env)
        result["full_pass"]["cpu_seconds"] = meter.seconds() - cpu_started
        result["warm_round_trip"] = warm_round_trip(env, calls)
        result["warm_call_after_pause"] = calls_after_pauses(env, resets_count, EPISODE_SECONDS)
    finally:
        env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=200)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--data", default=None)
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    meter = CpuMeter()
    try:
        figures = {
            start: measure(start, args.resets, args.calls, meter, args.data) for start in ("spawn", "fork")
        }
    finally:
        meter.close()
    spawn, fork = figures["spawn"], figures["fork"]
    figures["cpu_source"] = meter.source
    figures["fork_over_spawn"] = {
        "reset_median": fork["reset"]["median_ms"] / spawn["reset"]["median_ms"],
        "reset_p90": fork["reset"]["p90_ms"] / spawn["reset"]["p90_ms"],
        "reset_back_to_back_median": fork["reset_back_to_back"]["median_ms"]
        / spawn["reset_back_to_back"]["median_ms"],
        "cpu_per_episode": fork["reset"]["cpu_ms_per_episode"] / spawn["reset"]["cpu_ms_per_episode"],
        "full_pass": fork["full_pass"]["seconds"] / spawn["full_pass"]["seconds"],
        "warm_step": fork["warm_round_trip"]["env_step_median_ms"]
        / spawn["warm_round_trip"]["env_step_median_ms"],
    }
    print(json.dumps(figures, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
