"""The docker backend beside the process backend, measured the same way on the real ToolHop subset.

Figures per backend: pool start (constructor until the first worker is ready), episode hand-over (``load``
of back-to-back episodes: each takes a fresh worker, so this is the pool's refill rate), the warm call round
trip through the sandbox alone (median of many; docker target <= 3 ms), and a full pass through
``env.step`` over the 100 tasks (reset + one call per offered tool, gold arguments where the row has them).
Prints one table (markdown) with a column per backend, then the JSON figures. A backend may name a
container runtime: ``--backends process,docker,docker:runsc`` adds gVisor.

Usage: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_docker.py [--calls 2000] [--out F]``
Needs a Docker engine and the sandbox image (``hopgym sandbox build``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import gymnasium as gym
from _timing import TOOL, time_warm_calls

import hopgym  # noqa: F401  (registers ToolHop-v0)
from hopgym.agents.policies.scripted import schema_arguments
from hopgym.envs.chat import chat_env
from hopgym.sandbox import Sandbox, make_sandbox

BACKENDS = ("process", "docker")
DOCKER_WARM_CALL_TARGET_MS = 3.0


def sandbox_options(spec: str) -> tuple[str, dict[str, Any]]:
    """``docker:runsc`` -> ("docker", {"runtime": "runsc"})."""
    backend, _, runtime = spec.partition(":")
    return backend, ({"runtime": runtime} if runtime else {})


def open_sandbox(spec: str) -> Sandbox:
    backend, options = sandbox_options(spec)
    return make_sandbox(backend, **options)


def pool_start_ms(spec: str) -> float:
    started = time.perf_counter()
    sandbox = open_sandbox(spec)
    elapsed = (time.perf_counter() - started) * 1000
    sandbox.close()
    return elapsed


def episode_loads(spec: str, loads: int) -> dict[str, float]:
    """Median ``load`` time of back-to-back episodes (one fresh worker each)."""
    with open_sandbox(spec) as sandbox:
        latencies = []
        for _ in range(loads):
            started = time.perf_counter()
            sandbox.load([TOOL])
            latencies.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(latencies), "loads": loads}


def warm_calls(spec: str, count: int) -> dict[str, float]:
    with open_sandbox(spec) as sandbox:
        return time_warm_calls(sandbox, count)


def full_pass(spec: str) -> dict[str, Any]:
    backend, options = sandbox_options(spec)
    env = gym.make("ToolHop-v0", sandbox=backend, sandbox_options=options, max_turns=10**6)
    statuses: dict[str, int] = {}
    started = time.perf_counter()
    try:
        tasks = chat_env(env).tasks
        for index, task in enumerate(tasks):
            observation, _ = env.reset(options={"index": index})
            gold = {call.name: call.arguments for call in task.gold_calls}
            question = observation["messages"][1]["content"]
            for tool in observation["tools"]:
                name = tool["function"]["name"]
                arguments = gold.get(name) or schema_arguments(tool, question)
                call = {
                    "id": "b",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                _, _, _, _, info = env.step({"role": "assistant", "content": None, "tool_calls": [call]})
                status = info["calls"][0]["status"]
                statuses[status] = statuses.get(status, 0) + 1
        sandbox = chat_env(env).sandbox
        assert sandbox is not None  # ToolHopEnv makes its sandbox when made and drops it in close()
        isolation = sandbox.isolation
    finally:
        env.close()
    return {
        "seconds": time.perf_counter() - started,
        "tasks": len(tasks),
        "statuses": statuses,
        "isolation": isolation,
    }


def measure(spec: str, calls: int, loads: int) -> dict[str, Any]:
    return {
        "pool_start_ms": pool_start_ms(spec),
        "episode_load": episode_loads(spec, loads),
        "warm_call": warm_calls(spec, calls),
        "full_pass": full_pass(spec),
    }


def table(figures: dict[str, dict[str, Any]]) -> str:
    rows = {
        "isolation": lambda f: f"`{f['full_pass']['isolation']}`",
        "pool start (first worker ready)": lambda f: f"{f['pool_start_ms']:.0f} ms",
        "episode hand-over (back-to-back `load`), median": lambda f: (
            f"{f['episode_load']['median_ms']:.0f} ms"
        ),
        "warm call round trip, median (p90)": lambda f: (
            f"{f['warm_call']['median_ms']:.3f} ms ({f['warm_call']['p90_ms']:.3f} ms)"
        ),
        "full pass via env.step, 100 tasks": lambda f: (
            f"{f['full_pass']['seconds']:.1f} s ({sum(f['full_pass']['statuses'].values())} calls)"
        ),
    }
    lines = ["| figure | " + " | ".join(figures) + " |", "|---" * (len(figures) + 1) + "|"]
    lines += [
        f"| {name} | " + " | ".join(cell(f) for f in figures.values()) + " |" for name, cell in rows.items()
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="warm round trips to time per backend")
    parser.add_argument("--loads", type=int, default=20, help="back-to-back episode loads per backend")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated backends (BACKEND[:RUNTIME]) to measure",
    )
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    figures = {backend: measure(backend, args.calls, args.loads) for backend in args.backends.split(",")}
    print(table(figures))
    if "docker" in figures:
        median = figures["docker"]["warm_call"]["median_ms"]
        verdict = "meets" if median <= DOCKER_WARM_CALL_TARGET_MS else "MISSES"
        print(
            f"\ndocker warm call median {median:.3f} ms {verdict} "
            f"the {DOCKER_WARM_CALL_TARGET_MS:g} ms target"
        )
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
