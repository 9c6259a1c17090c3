"""The eval runner's own cost (env + runner + litellm client) per model turn, and local-model throughput.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_runner.py [--episodes N]
[--concurrency K] [--turn-seconds S] [--local N]``. Prints one JSON object.

* ``zero_latency``: a scripted server (in its own process, so it does not share the runner's GIL) answers
  at once; fc episodes of two turns (one real sandboxed tool call, then an answer). Turns per second is
  the most the runner can drive.
* ``realistic``: the same with every reply delayed ``--turn-seconds`` (default 1 s, a realistic model
  turn) at ``--concurrency`` (default 32). The overhead per turn is an episode's wall time minus the
  model's delays, per turn, split into the model client's share (litellm, HTTP) and the env + runner's
  share (sandboxed steps, records); target <= 5 % of the turn.
* ``local`` (with ``--local N``): N fc episodes with the embedded SmolLM2 server, episodes per minute.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hopgym.agents.model import ModelConfig
from hopgym.agents.records import read_episodes
from hopgym.agents.runner import EvalConfig, EvalRun
from hopgym.agents.scripted_server import ScriptedModelServer, ScriptedReply, tool_call


def two_turn_policy(delay: float):
    """First turn: call the first offered tool with every required parameter set; then answer."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        if any(message["role"] == "tool" for message in request["messages"]):
            return ScriptedReply(content="I do not know", delay=delay)
        function = request["tools"][0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),), delay=delay)

    return policy


def _serve(delay: float, address: Any, stop: Any) -> None:
    with ScriptedModelServer(two_turn_policy(delay)) as server:
        address.put(server.api_base)
        stop.wait()


def measure(episodes: int, concurrency: int, delay: float) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    address, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(delay, address, stop), daemon=True)
    server.start()
    try:
        api_base = address.get(timeout=30)
        with tempfile.TemporaryDirectory() as folder:
            config = EvalConfig(
                out=Path(folder) / "run",
                model=ModelConfig("openai/scripted", api_base=api_base, api_key="sk", timeout=60),
                concurrency=concurrency,
                limit=episodes,
                progress=False,
            )
            started = time.perf_counter()
            EvalRun(config).run()
            wall = time.perf_counter() - started
            records = read_episodes(config.out / "episodes.jsonl")
    finally:
        stop.set()
        server.join(timeout=10)
    turns = sum(record["turns"] for record in records)
    overhead_ms = [(r["latency_ms"] - 1000 * delay * r["turns"]) / r["turns"] for r in records]
    client_ms = [(r["agent"]["model_latency_ms"] - 1000 * delay * r["turns"]) / r["turns"] for r in records]
    env_runner_ms = [(r["latency_ms"] - r["agent"]["model_latency_ms"]) / r["turns"] for r in records]
    result = {
        "episodes": len(records),
        "errors": sum(record["error"] is not None for record in records),
        "concurrency": concurrency,
        "model_delay_s": delay,
        "wall_s": round(wall, 2),
        "turns_per_s": round(turns / wall, 1),
        "overhead_per_turn_median_ms": round(statistics.median(overhead_ms), 1),
        "overhead_per_turn_mean_ms": round(statistics.fmean(overhead_ms), 1),
        "of_which_model_client_mean_ms": round(statistics.fmean(client_ms), 1),
        "of_which_env_and_runner_mean_ms": round(statistics.fmean(env_runner_ms), 1),
    }
    if delay:
        result["overhead_fraction_of_turn"] = round(result["overhead_per_turn_mean_ms"] / (1000 * delay), 4)
    return result


def measure_local(episodes: int) -> dict[str, Any]:
    from hopgym.agents.local_server import TOOL_CHOICE_SUBSTITUTES, local_model_string, local_server

    with local_server() as server, tempfile.TemporaryDirectory() as folder:
        config = EvalConfig(
            out=Path(folder) / "run",
            model=ModelConfig(
                local_model_string(),
                api_base=server.api_base,
                api_key="sk",
                max_tokens=128,
                timeout=600,
                tool_choice_substitutes=TOOL_CHOICE_SUBSTITUTES,
            ),
            env_kwargs={"max_turns": 3},
            concurrency=2,
            limit=episodes,
            progress=False,
        )
        started = time.perf_counter()
        EvalRun(config).run()
        wall = time.perf_counter() - started
        records = read_episodes(config.out / "episodes.jsonl")
    return {
        "episodes": len(records),
        "errors": sum(record["error"] is not None for record in records),
        "turns": sum(record["turns"] for record in records),
        "wall_s": round(wall, 1),
        "episodes_per_minute": round(60 * len(records) / wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turn-seconds", type=float, default=1.0)
    parser.add_argument("--local", type=int, default=0, help="also run N episodes with the local model")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    report = {
        "zero_latency": measure(args.episodes, args.concurrency, 0.0),
        "realistic": measure(args.episodes, args.concurrency, args.turn_seconds),
    }
    if args.local:
        report["local"] = measure_local(args.local)
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
