"""What pausing the worker between calls costs a warm call: two sandboxes built alike whose workers are
stopped between calls (the default) or not, timed in alternating blocks in one process.

The pause is the SIGSTOP after each reply and the SIGCONT after each request (``launcher.PausingConnection``):
it is what keeps threads left by tool code from burning CPU between calls, and it costs one more wake-up
of the worker per call (the SIGSTOP reaches a worker asleep in its read).

Usage: ``python benchmarks/bench_pause.py [--blocks 20] [--calls 300] [--out FILE]``
"""

from __future__ import annotations

import argparse
import statistics

from _timing import report, warm_call_latencies

from hopgym.sandbox.cgroups import resolve_cgroups
from hopgym.sandbox.isolation import resolve_isolation
from hopgym.sandbox.launcher import ProcessLauncher
from hopgym.sandbox.limits import SandboxLimits, cgroup_memory_bytes
from hopgym.sandbox.pool import Launcher, WorkerHandle
from hopgym.sandbox.pooled import PooledSandbox


class UnpausedLauncher(Launcher):
    """Hands out its workers without the pause: as if they never said ready (``pause_pidfd`` unset)."""

    def __init__(self, launcher: ProcessLauncher) -> None:
        self._launcher = launcher

    def start(self) -> WorkerHandle:
        worker = self._launcher.start()
        worker.connection.pause_pidfd = None
        return worker

    def close(self) -> None:
        self._launcher.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20, help="timed blocks per sandbox")
    parser.add_argument("--calls", type=int, default=300, help="warm calls per block")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    limits = SandboxLimits()
    plan = resolve_isolation("auto", True)
    cgroups = resolve_cgroups("auto", limits.max_tasks, cgroup_memory_bytes(limits))
    launchers = {
        "paused": ProcessLauncher(plan, limits, None, cgroups),
        "unpaused": UnpausedLauncher(ProcessLauncher(plan, limits, None, cgroups)),
    }
    sandboxes = {
        name: PooledSandbox(launcher, plan.describe(), limits=limits) for name, launcher in launchers.items()
    }
    medians: dict[str, list[float]] = {name: [] for name in sandboxes}
    try:
        for block in range(args.blocks):
            order = list(sandboxes) if block % 2 == 0 else list(sandboxes)[::-1]
            for name in order:
                medians[name].append(statistics.median(warm_call_latencies(sandboxes[name], args.calls)))
    finally:
        for name, sandbox in sandboxes.items():
            sandbox.close()
            launchers[name].close()
    paused, unpaused = (statistics.median(medians[name]) for name in ("paused", "unpaused"))
    figures = {
        "isolation": "+".join(filter(None, [plan.describe(), cgroups.describe()])),
        "blocks": args.blocks,
        "calls_per_block": args.calls,
        "paused_median_ms": paused,
        "unpaused_median_ms": unpaused,
        "pause_cost_ms": paused - unpaused,
        "paused_over_unpaused": paused / unpaused,
    }
    report(figures, args.out)


if __name__ == "__main__":
    main()
