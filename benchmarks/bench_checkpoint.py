"""The two CPU engines for ``hopgym eval --model <folder>`` on the same weights: the checkpoint server
(transformers' own generation, fp32: agents/model/checkpoint_entry.py) and the embedded llama.cpp server
(F16 GGUF). The weights are the embedded SmolLM2-135M: its GGUF is what llama.cpp serves, and its
transformers folder (train/model.py converts it once) is what ``hopgym train`` starts from and saves
checkpoints of.

Per engine, in one run: prompt tokens/s (a one-token request on a prompt the server has not seen),
generation tokens/s (a ``--tokens`` request on the same prompt, less the one-token request's time, so
llama.cpp's prompt cache and transformers' recomputation are both taken out), over the first turn of
``--tasks`` KGTool-v0 tasks; then the tokens/s of ``--tasks`` such requests sent at once (the checkpoint
server generates them as one batch, llama.cpp's one slot takes them in turn), and episodes/minute of
``hopgym eval --concurrency 1`` on those tasks (the run folder's episode latencies). Both servers run with
``HOPGYM_LOCAL_THREADS`` threads (default 1: on a shared machine more threads spin against other
processes; agents/model/local_server.py). Wall seconds: on a busy machine the ratio is the point.

Usage: ``HOPGYM_DATA=../shared/data python benchmarks/bench_checkpoint.py [--tasks 3] [--tokens 32]
[--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym
from _timing import report

import hopgym  # noqa: F401  (registers the envs)
from hopgym.agents.model.checkpoint_server import checkpoint_model_string, checkpoint_server
from hopgym.agents.model.client import prepare_messages
from hopgym.agents.model.local_server import local_model_string, local_server
from hopgym.agents.model.server_process import ServerProcess
from hopgym.train.model import model_source

ENV_KWARGS = {"kg": "family-e", "patterns": "1p", "n": 8, "n_distractors": 0, "max_turns": 3}


def first_turns(count: int) -> list[dict[str, Any]]:
    """The first request body of each of ``count`` KGTool-v0 tasks."""
    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        bodies = []
        for index in range(count):
            observation, _ = env.reset(options={"index": index})
            bodies.append(
                {"messages": prepare_messages(observation["messages"]), "tools": observation["tools"]}
            )
        return bodies
    finally:
        env.close()


def timed_request(server: ServerProcess, model: str, body: dict[str, Any], tokens: int) -> tuple[float, dict]:
    request = {**body, "model": model.removeprefix("openai/"), "max_tokens": tokens, "temperature": 0.0}
    data = json.dumps(request).encode()
    started = time.perf_counter()
    post = urllib.request.Request(
        f"{server.api_base}/chat/completions", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(post, timeout=600) as response:
        answer = json.load(response)
    return time.perf_counter() - started, answer["usage"]


def token_rates(server: ServerProcess, model: str, bodies: list[dict[str, Any]], tokens: int) -> dict:
    prompt_rates, generation_rates = [], []
    for body in bodies:
        prompt_seconds, usage = timed_request(server, model, body, 1)
        prompt_rates.append(usage["prompt_tokens"] / prompt_seconds)
        prefix_seconds, _ = timed_request(server, model, body, 1)  # cached by llama.cpp, recomputed by torch
        seconds, usage = timed_request(server, model, body, tokens)
        if usage["completion_tokens"] > 1:
            generation_rates.append((usage["completion_tokens"] - 1) / max(seconds - prefix_seconds, 1e-6))
    return {
        "prompt_tokens_per_s": statistics.median(prompt_rates),
        "generated_tokens_per_s": statistics.median(generation_rates) if generation_rates else None,
    }


def concurrent_rate(server: ServerProcess, model: str, bodies: list[dict[str, Any]], tokens: int) -> dict:
    """Completion tokens/s with every body sent at once: what ``hopgym eval --concurrency N`` gets."""
    from concurrent.futures import ThreadPoolExecutor

    started = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        usages = list(pool.map(lambda body: timed_request(server, model, body, tokens)[1], bodies))
    seconds = time.perf_counter() - started
    return {"concurrent_generated_tokens_per_s": sum(u["completion_tokens"] for u in usages) / seconds}


def episodes_per_minute(model: str, tasks: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env_args = [f"--env-arg={key}={json.dumps(value)}" for key, value in ENV_KWARGS.items()]
        command = [sys.executable, "-m", "hopgym.cli", "eval", "--env", "KGTool-v0", *env_args]
        command += ["--model", model, "--limit", str(tasks), "--max-tokens", str(tokens), "--out", tmp]
        command += ["--concurrency", "1"]  # episode latencies add up to the run's time
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        episodes = [json.loads(line) for line in (Path(tmp) / "episodes.jsonl").read_text().splitlines()]
    seconds = sum(episode["latency_ms"] for episode in episodes) / 1000
    return {
        "episodes": len(episodes),
        "episodes_per_minute": 60 * len(episodes) / seconds,
        "tool_calls": sum(len(episode["calls"]) for episode in episodes),
        "turns": sum(episode["turns"] for episode in episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3, help="KGTool-v0 tasks timed per engine")
    parser.add_argument("--tokens", type=int, default=32, help="tokens of the generation request and cap")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    os.environ.setdefault("HOPGYM_LOCAL_THREADS", "1")
    folder = Path(model_source("local"))
    bodies = first_turns(args.tasks)
    engines = {
        "transformers": (checkpoint_server(folder), checkpoint_model_string(folder), str(folder)),
        "llama_cpp_f16": (local_server(), local_model_string(), "local"),
    }
    figures: dict[str, Any] = {"threads": int(os.environ["HOPGYM_LOCAL_THREADS"]), "tasks": args.tasks}
    figures["load_average"] = os.getloadavg()[0]
    for name, (server, model, argument) in engines.items():
        started = time.perf_counter()
        with server:
            figures[name] = {"startup_s": time.perf_counter() - started}
            figures[name].update(token_rates(server, model, bodies, args.tokens))
            figures[name].update(concurrent_rate(server, model, bodies, args.tokens))
        figures[name].update(episodes_per_minute(argument, args.tasks, args.tokens))
    rates = ("prompt_tokens_per_s", "generated_tokens_per_s", "concurrent_generated_tokens_per_s")
    for key in (*rates, "episodes_per_minute"):
        if figures["transformers"][key] and figures["llama_cpp_f16"][key]:
            figures[f"llama_cpp_over_transformers_{key}"] = (
                figures["llama_cpp_f16"][key] / figures["transformers"][key]
            )
    report(figures, args.out)


if __name__ == "__main__":
    main()
