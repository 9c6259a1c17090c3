"""The embedded model's speed from the weights as shipped (Q4_1) and from the F16 copy its server loads
(agents/model/local_weights.py): prompt and generation tokens per CPU second on one thread, in alternating
rounds in one process, on the prompt fc sends for a real ToolHop task.

Per CPU second, not per wall second: with one thread the two are the same on an idle machine, and CPU
time does not count what other processes take of a shared machine. Each round evaluates the prompt from an
empty cache (one token generated), then generates from the cached prompt.

Usage: ``HOPGYM_DATA=../shared/data python benchmarks/bench_local_model.py [--rounds 3] [--tokens 64]
[--task-index 0] [--out FILE]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import llama_cpp
from _timing import report

import hopgym  # noqa: F401  (registers the envs)
from hopgym.agents.model.llama_entry import render_prompt
from hopgym.agents.model.local_server import find_local_model
from hopgym.agents.model.local_weights import f16_weights

ASSISTANT_TURN = "<|im_start|>assistant\n"


def task_prompt(index: int) -> str:
    env = gym.make("ToolHop-v0")
    try:
        observation, _ = env.reset(options={"index": index})
    finally:
        env.close()
    return render_prompt(observation["messages"], observation["tools"]) + ASSISTANT_TURN


def time_round(llama: llama_cpp.Llama, prompt: str, tokens: int) -> dict[str, Any]:
    llama.reset()
    started = time.process_time()
    llama.create_completion(prompt, max_tokens=1, temperature=0.0)
    prompt_seconds = time.process_time() - started
    started = time.process_time()
    completion = llama.create_completion(prompt, max_tokens=tokens, temperature=0.0)  # the prompt is cached
    generation_seconds = time.process_time() - started
    generated = completion["usage"]["completion_tokens"]
    return {
        "prompt_seconds": prompt_seconds,
        "generated": generated,
        "generation_seconds": generation_seconds,
        "text": completion["choices"][0]["text"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per weight file")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per round")
    parser.add_argument("--task-index", type=int, default=0, help="the ToolHop row whose prompt is timed")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    shipped = find_local_model()
    files = {"shipped": shipped, "f16": f16_weights(shipped)}
    models = {
        name: llama_cpp.Llama(str(path), n_ctx=4096, n_threads=1, n_threads_batch=1, verbose=False)
        for name, path in files.items()
    }
    prompt = task_prompt(args.task_index)
    prompt_tokens = len(models["shipped"].tokenize(prompt.encode(), special=True))
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in models}
    for number in range(args.rounds):
        for name in list(models) if number % 2 == 0 else list(models)[::-1]:
            rounds[name].append(time_round(models[name], prompt, args.tokens))
    figures: dict[str, Any] = {"prompt_tokens": prompt_tokens, "rounds": args.rounds, "threads": 1}
    for name, timed in rounds.items():
        figures[name] = {
            "file": files[name].name,
            "prompt_tokens_per_cpu_s": prompt_tokens / statistics.median(r["prompt_seconds"] for r in timed),
            "generated_tokens_per_cpu_s": statistics.median(
                r["generated"] / r["generation_seconds"] for r in timed
            ),
            "completion": timed[0]["text"],
        }
    figures["f16_over_shipped_prompt"] = (
        figures["f16"]["prompt_tokens_per_cpu_s"] / figures["shipped"]["prompt_tokens_per_cpu_s"]
    )
    figures["f16_over_shipped_generation"] = (
        figures["f16"]["generated_tokens_per_cpu_s"] / figures["shipped"]["generated_tokens_per_cpu_s"]
    )
    report(figures, args.out)


if __name__ == "__main__":
    main()
