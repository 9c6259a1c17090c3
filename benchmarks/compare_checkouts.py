"""Warm call and episode start of two checkouts (e.g. before and after a change), interleaved in one run.

The machine is shared, so figures from separate runs differ by tens of percent; this runs the same
measuring code (this file) against each checkout's own installation, alternating old/new in fresh
subprocesses (ABBA ... order, so a slow drift of the machine's load falls on both), and reports per side
the median and p90 over every sample of every round, and the median of the per-round ratios new/old.

Figures, all through the process sandbox with default options (``spares=1``):

- ``warm_call``: ``Sandbox.call`` of a small tool after warm-up (``_timing.time_warm_calls``).
- ``sandbox_load``: ``Sandbox.load`` of that tool once the spare is ready: the previous episode's worker
  killed, the spare handed over and loaded (the episode's first call is possible when it returns).
- ``reset``: ``ToolHopEnv.reset`` over the real subset once the spare is ready (reset -> first call
  possible), and ``reset_back_to_back`` with no pause, where a worker's start bounds the rate.
- ``env_step``: ``ToolHopEnv.step`` with one valid call after warm-up (``bench_env.warm_step_latencies``,
  the figure ``bench_env.py`` reports as ``env_step_median_ms``): the env's own work plus a warm call.
- ``cpu_per_episode``: CPU of every process the env starts per warm reset (``bench_episode_start.CpuMeter``:
  a cpuacct group, root and cgroup v1), one sample per process.
- ``full_pass``: ``bench_env.full_pass`` (reset + one call per offered tool, every task) in ms, one sample
  per process.

Each checkout needs its own ``.venv`` with the checkout installed (``pip install -e``): the child process
runs ``CHECKOUT/.venv/bin/python`` and prints which ``hopgym`` it imported.

Usage: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/compare_checkouts.py --old ../old-checkout
[--new .] [--rounds 8] [--calls 400] [--resets 15] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _timing import TOOL, percentile, report, warm_call_latencies

HERE = Path(__file__).resolve().parent
FIGURES = (
    "warm_call",
    "sandbox_load",
    "reset",
    "reset_back_to_back",
    "env_step",
    "cpu_per_episode",
    "full_pass",
)


def child(calls: int, resets: int) -> dict[str, Any]:
    """Every figure's samples in ms, measured in this process with whatever ``hopgym`` it imports."""

    import gymnasium
    from bench_env import full_pass, warm_step_latencies
    from bench_episode_start import CpuMeter
    from gymnasium.envs.registration import load_env_creator

    import hopgym
    from hopgym.sandbox import make_sandbox

    # The registered entry point: the env class wherever the compared checkout keeps it.
    ToolHopEnv = load_env_creator(gymnasium.spec("ToolHop-v0").entry_point)

    samples: dict[str, Any] = {"hopgym": hopgym.__file__}
    with make_sandbox("process") as sandbox:
        samples["isolation"] = sandbox.isolation
        samples["warm_call"] = warm_call_latencies(sandbox, calls)
        samples["sandbox_load"] = []
        for _ in range(resets):
            sandbox.wait_until_warm()
            started = time.perf_counter()
            sandbox.load([TOOL])
            samples["sandbox_load"].append((time.perf_counter() - started) * 1000)
    meter = CpuMeter()  # before the env: its sandbox's processes start inside the meter's group
    env = ToolHopEnv(max_turns=10**9, sandbox_options={"spares": 1})
    try:
        for name, warm in (("reset", True), ("reset_back_to_back", False)):
            samples[name] = []
            cpu_started = meter.seconds()
            for index in range(resets):
                if warm:
                    env.sandbox.wait_until_warm()
                started = time.perf_counter()
                env.reset(options={"index": index % len(env.tasks)})
                samples[name].append((time.perf_counter() - started) * 1000)
            if warm:
                samples["cpu_per_episode"] = [(meter.seconds() - cpu_started) * 1000 / resets]
        samples["env_step"] = warm_step_latencies(env, calls)[1]
        samples["full_pass"] = [full_pass(env)["seconds"] * 1000]
    finally:
        env.close()
        meter.close()
    return samples


def run_side(checkout: Path, calls: int, resets: int) -> dict[str, Any]:
    python = checkout / ".venv" / "bin" / "python"
    command = [
        str(python),
        str(Path(__file__).resolve()),
        "--child",
        f"--calls={calls}",
        f"--resets={resets}",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{python} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per figure: each side's median over all samples, and the median (and range) of per-round ratios."""
    result: dict[str, Any] = {}
    for figure in FIGURES:
        pooled = {side: [x for r in rounds for x in r[side][figure]] for side in ("old", "new")}
        ratios = [statistics.median(r["new"][figure]) / statistics.median(r["old"][figure]) for r in rounds]
        result[figure] = {
            "old_median_ms": statistics.median(pooled["old"]),
            "new_median_ms": statistics.median(pooled["new"]),
            "old_p90_ms": percentile(pooled["old"], 0.9),
            "new_p90_ms": percentile(pooled["new"], 0.9),
            "ratio_of_medians": statistics.median(pooled["new"]) / statistics.median(pooled["old"]),
            "median_round_ratio": statistics.median(ratios),
            "round_ratio_range": [min(ratios), max(ratios)],
            "samples_per_side": len(pooled["old"]),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="the checkout measured as 'old' (has its own .venv)")
    parser.add_argument("--new", type=Path, default=HERE.parent, help="the checkout measured as 'new'")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of one old and one new process")
    parser.add_argument("--calls", type=int, default=400, help="warm calls timed per process")
    parser.add_argument("--resets", type=int, default=15, help="loads and resets timed per process, each")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.calls, args.resets)))
        return
    if args.old is None:
        parser.error("--old CHECKOUT is required")
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    rounds = []
    for index in range(args.rounds):
        order = ("old", "new") if index % 2 == 0 else ("new", "old")
        rounds.append({side: run_side(sides[side], args.calls, args.resets) for side in order})
        medians = {s: statistics.median(rounds[-1][s]["warm_call"]) for s in ("old", "new")}
        print(
            f"round {index + 1}/{args.rounds}: warm call old {medians['old']:.4f} ms, "
            f"new {medians['new']:.4f} ms",
            file=sys.stderr,
            flush=True,
        )
    figures = {
        "checkouts": {
            side: {
                "path": str(path),
                "hopgym": rounds[0][side]["hopgym"],
                "isolation": rounds[0][side]["isolation"],
            }
            for side, path in sides.items()
        },
        "rounds": args.rounds,
        "calls_per_process": args.calls,
        "resets_per_process": args.resets,
        "figures": summary(rounds),
    }
    report(figures, args.out)


if __name__ == "__main__":
    main()
