"""Env steps per second and per-step latency, scripted policy: in process and through the OpenEnv server.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_serve.py [--concurrency 1,8,64]``
(needs ``hopgym[serve]``). Prints one JSON object:
- ``in_process`` / ``server``: for each number of concurrent episodes, steps/s over the whole run and the
  median and p90 of one step as the policy sees it (in process: ``Rollouts``, a worker thread per step;
  server: ``hopgym serve env`` as a subprocess, one ``HopgymEnvClient`` WebSocket session per episode);
- ``server_added_ms``: server median minus in-process median, per step, at each concurrency;
- with ``--baseline CHECKOUT``: ``server_baseline``, the same server run from that checkout's code (e.g. the
  commit before a change; the client is this one's), measured in rounds alternating with this checkout's
  server (``--rounds``), and ``server_ratio``: this checkout's median over the baseline's, per concurrency;
- ``env_step_vs_sandbox``: ``env.step`` with one valid call, warm (ToolHop's official protocol), against the
  raw sandbox call of a small tool in the same run (target: at most 2x).
Each episode calls the task's first tool (placeholder arguments) for ``--turns`` turns, then answers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import percentile, report, time_warm_calls
from bench_env import warm_step_latencies

from hopgym.agents.adapters.openenv_client import HopgymEnvClient
from hopgym.agents.adapters.openenv_types import HopgymAction
from hopgym.agents.evaluation.rollouts import Rollouts
from hopgym.agents.model.scripted_server import placeholder_arguments
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.messages import tool_call
from hopgym.sandbox import make_sandbox

READY = re.compile(r"^ready: --base-url (\S+)$")


def action(observation: Mapping[str, Any], turns: int) -> dict[str, Any] | str:
    """Call the first tool until ``turns`` tool results are in, then answer."""
    messages = observation["messages"]
    results = sum(message["role"] == "tool" for message in messages)
    if results >= turns or not observation["tools"]:
        return "Final answer: unknown"
    function = observation["tools"][0]["function"]
    arguments = placeholder_arguments(function.get("parameters") or {})
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(function["name"], arguments, "b")]}


def figures(step_ms: list[float], seconds: float) -> dict[str, float]:
    return {
        "steps": len(step_ms),
        "steps_per_s": round(len(step_ms) / seconds, 1),
        "median_ms": round(statistics.median(step_ms), 3),
        "p90_ms": round(percentile(step_ms, 0.9), 3),
    }


async def in_process(concurrency: int, episodes: int, turns: int) -> dict[str, float]:
    step_ms: list[float] = []
    last: dict[int, float] = {}

    async def policy(observation: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
        now = time.perf_counter()
        key = id(asyncio.current_task())
        if info["turn"] > 0:  # the time since this episode's previous action: one step
            step_ms.append((now - last[key]) * 1000)
        chosen = action(observation, turns)
        last[key] = time.perf_counter()
        return chosen

    kwargs = {"protocol": "hopgym", "max_turns": turns + 1}
    async with Rollouts("ToolHop-v0", kwargs, concurrency) as rollouts:
        await rollouts.run(policy, [{"index": i % 100} for i in range(concurrency)])  # warm-up
        step_ms.clear()
        started = time.perf_counter()
        results = await rollouts.run(policy, [{"index": i % 100} for i in range(episodes)])
        seconds = time.perf_counter() - started
    assert all(result.error is None for result in results), [r.error for r in results if r.error]
    return figures(step_ms, seconds)


async def through_server(url: str, concurrency: int, episodes: int, turns: int) -> dict[str, float]:
    """``concurrency`` sessions, opened (their envs made) and warmed up before the timed episodes."""
    step_ms, seconds = await server_steps(url, concurrency, episodes, turns)
    return figures(step_ms, seconds)


async def server_steps(url: str, concurrency: int, episodes: int, turns: int) -> tuple[list[float], float]:
    """Each timed step's latency in ms, and the timed episodes' wall time."""
    step_ms: list[float] = []
    queue: list[int] = []

    async def play(client: HopgymEnvClient) -> None:
        while queue:
            result = await client.reset(index=queue.pop() % 100)
            while not result.done:
                chosen = HopgymAction.of(action(result.observation.model_dump(), turns))
                started = time.perf_counter()
                result = await client.step(chosen)
                step_ms.append((time.perf_counter() - started) * 1000)

    clients = [HopgymEnvClient(url) for _ in range(concurrency)]
    try:
        for client in clients:
            await client.connect()
        queue[:] = range(concurrency)
        await asyncio.gather(*(play(client) for client in clients))  # warm-up: each session's env made
        queue[:] = range(episodes)
        step_ms.clear()
        started = time.perf_counter()
        await asyncio.gather(*(play(client) for client in clients))
        return step_ms, time.perf_counter() - started
    finally:
        for client in clients:
            await client.close()


def serve(max_sessions: int, turns: int, checkout: str | None = None) -> tuple[subprocess.Popen, str]:
    """``hopgym serve env`` as a subprocess: this checkout's, or ``checkout``'s code on the same venv."""
    command = [sys.executable, "-m", "hopgym.cli", "serve", "env", "--max-sessions", str(max_sessions)]
    command += ["--env-arg", "protocol=hopgym", "--env-arg", f"max_turns={turns + 1}"]
    environment = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())} if checkout else None
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
    assert server.stdout is not None
    match = READY.match(server.stdout.readline().strip())
    assert match, "hopgym serve env did not start"
    return server, match.group(1)


def stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=120)


def against_baseline(
    baseline: str, levels: list[int], episodes: int, turns: int, rounds: int
) -> dict[str, dict[int, Any]]:
    """This checkout's server and ``baseline``'s, both running, measured in alternating rounds (so the
    machine's drifting load falls on both); each side's figures over all its rounds."""
    servers = {"baseline": serve(max(levels), turns, baseline), "server": serve(max(levels), turns)}
    try:
        out: dict[str, dict[int, Any]] = {"server": {}, "server_baseline": {}, "server_ratio": {}}
        for level in levels:
            samples: dict[str, tuple[list[float], float]] = {side: ([], 0.0) for side in servers}
            for round_number in range(rounds):
                order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
                for side in order:
                    step_ms, seconds = asyncio.run(
                        server_steps(servers[side][1], level, level * episodes, turns)
                    )
                    samples[side] = (samples[side][0] + step_ms, samples[side][1] + seconds)
            out["server"][level] = figures(*samples["server"])
            out["server_baseline"][level] = figures(*samples["baseline"])
            ratio = out["server"][level]["median_ms"] / out["server_baseline"][level]["median_ms"]
            out["server_ratio"][level] = round(ratio, 3)
        return out
    finally:
        for process, _ in servers.values():
            stop(process)


def env_step_vs_sandbox(calls: int) -> dict[str, Any]:
    env = ToolHopEnv(max_turns=10**9)
    try:
        _, step_ms, record_ms = warm_step_latencies(env, calls)
    finally:
        env.close()
    with make_sandbox("process") as sandbox:
        raw = time_warm_calls(sandbox, calls)
    step_median = statistics.median(step_ms)
    return {
        "env_step_median_ms": round(step_median, 3),
        "env_step_p90_ms": round(percentile(step_ms, 0.9), 3),
        "call_record_latency_median_ms": round(statistics.median(record_ms), 3),
        "raw_sandbox_call_median_ms": round(raw["median_ms"], 3),
        "ratio": round(step_median / raw["median_ms"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,8,64", help="comma list of concurrent episodes")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per concurrent slot")
    parser.add_argument("--turns", type=int, default=20, help="tool-calling turns per episode")
    parser.add_argument("--calls", type=int, default=1000, help="warm calls for env.step vs sandbox")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    parser.add_argument("--baseline", help="also run the server from this checkout, in alternating rounds")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side with --baseline")
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    result: dict[str, Any] = {"turns": args.turns, "in_process": {}, "server": {}, "server_added_ms": {}}
    result["env_step_vs_sandbox"] = env_step_vs_sandbox(args.calls)
    for level in levels:
        episodes = level * args.episodes
        result["in_process"][level] = asyncio.run(in_process(level, episodes, args.turns))
    if args.baseline:
        result.update(against_baseline(args.baseline, levels, args.episodes, args.turns, args.rounds))
    else:
        server, url = serve(max(levels), args.turns)
        try:
            for level in levels:
                episodes = level * args.episodes
                result["server"][level] = asyncio.run(through_server(url, level, episodes, args.turns))
        finally:
            stop(server)
    for level in levels:
        added = result["server"][level]["median_ms"] - result["in_process"][level]["median_ms"]
        result["server_added_ms"][level] = round(added, 3)
    report(result, args.out)


if __name__ == "__main__":
    main()
