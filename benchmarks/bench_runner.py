"""The eval runner's own cost (env + runner + model client) per model turn, and local-model throughput.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_runner.py [--episodes N]
[--concurrency K] [--turn-seconds S] [--jitter J] [--local N] [--model M ...]``. Prints one JSON object.
``--model`` (repeatable) names the scripted server's model as the client sees it: ``openai/scripted``
(default) takes the openai client route, ``hosted_vllm/scripted`` the litellm route; with several, the
scripted figures are measured per model, alternately, in one run.

Episodes are fc episodes of two turns (one real sandboxed tool call, then an answer) against a scripted
server in its own process (so it does not share the runner's GIL).

* ``zero_latency``: the server answers at once. Turns per second is the most the runner can drive.
* ``realistic``: every reply takes a model turn of ``--turn-seconds`` (default 1 s) spread uniformly by
  +-``--jitter`` (default 0.5: 0.5-1.5 s, as replies of different lengths take), at ``--concurrency``
  (default 32). The overhead per turn is an episode's wall time minus the model's delays, per turn, split
  into the model client's share (openai client or litellm, HTTP) and the env + runner's share (sandboxed
  steps, records).
  ``steady`` covers the episodes after the first wave of ``concurrency`` ones, which is what a long run
  pays per turn; the first wave also pays the start: every episode's first request is built at the same
  moment, one after another on the event loop. Target: the env + runner share <= 5 % of the turn.
* ``lock_step``: the same without jitter, every episode in step: the worst case for the event loop.
* ``local`` (with ``--local N``): N fc episodes of up to 3 turns with the embedded SmolLM2 server, per
  ``--local-concurrency`` (repeatable): turns per minute, and prompt tokens evaluated per turn (from the
  server's log) against those sent. At concurrency 1 each turn's prompt extends the previous one in the
  KV cache; above 1, episodes interleave in the one llama context and evict each other's prompt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.records import EpisodeRecord, read_episodes
from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call


def turn_delay(question: str, turn: int, mean: float, jitter: float) -> float:
    """The model delay of one turn: ``mean`` spread uniformly by +-``jitter`` (a fraction), as a pure
    function of the episode's question and the turn number, so the benchmark can subtract it again."""
    digest = hashlib.sha256(f"{turn}:{question}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2**64
    return mean * (1 - jitter + 2 * jitter * unit)


def two_turn_policy(mean: float, jitter: float):
    """First turn: call the first offered tool with every required parameter set; then answer."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        messages = request["messages"]
        question = next(message["content"] for message in messages if message["role"] == "user")
        turn = sum(message["role"] == "assistant" for message in messages)
        delay = turn_delay(question, turn, mean, jitter)
        if any(message["role"] == "tool" for message in messages):
            return ScriptedReply(content="I do not know", delay=delay)
        function = request["tools"][0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),), delay=delay)

    return policy


def _serve(mean: float, jitter: float, address: Any, stop: Any) -> None:
    with ScriptedModelServer(two_turn_policy(mean, jitter)) as server:
        address.put(server.api_base)
        stop.wait()


def model_delays(record: EpisodeRecord, mean: float, jitter: float) -> float:
    """The seconds the scripted server slept over one recorded episode."""
    question = next(message["content"] for message in record.messages if message["role"] == "user")
    return sum(turn_delay(question, turn, mean, jitter) for turn in range(record.turns))


def scripted_eval_config(
    out: Path,
    api_base: str,
    episodes: int,
    concurrency: int,
    model_name: str = "openai/scripted",
    **changes: Any,
) -> EvalConfig:
    """A ToolHop run of ``episodes`` against the scripted server at ``api_base``, without a progress bar."""
    model = ModelConfig(model_name, api_base=api_base, api_key="sk", timeout=60)
    return EvalConfig(
        out=out, model=model, concurrency=concurrency, limit=episodes, progress=False, **changes
    )


def measure(
    episodes: int, concurrency: int, delay: float, jitter: float = 0.0, model_name: str = "openai/scripted"
) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    address, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(delay, jitter, address, stop), daemon=True)
    server.start()
    try:
        api_base = address.get(timeout=30)
        with tempfile.TemporaryDirectory() as folder:
            config = scripted_eval_config(Path(folder) / "run", api_base, episodes, concurrency, model_name)
            run = EvalRun(config)  # made outside the clock: importing a client takes seconds
            started = time.perf_counter()
            run.run()
            wall = time.perf_counter() - started
            records = read_episodes(config.out / "episodes.jsonl")
    finally:
        stop.set()
        server.join(timeout=10)
    turns = sum(record.turns for record in records)
    result = {
        "episodes": len(records),
        "errors": sum(record.error is not None for record in records),
        "concurrency": concurrency,
        "model_delay_s": delay,
        "model_delay_jitter": jitter,
        "wall_s": round(wall, 2),
        "turns_per_s": round(turns / wall, 1),
        "all": overhead(records, delay, jitter),
    }
    later = [record for record in records if record.index >= concurrency]
    if later:
        result["steady"] = overhead(later, delay, jitter)
    return result


def overhead(records: list[EpisodeRecord], delay: float, jitter: float) -> dict[str, Any]:
    """Per-turn overhead of these episodes: wall time minus the model's delays, and its two shares."""
    total, client, env_runner = [], [], []
    for record in records:
        slept_ms = 1000 * model_delays(record, delay, jitter)
        model_ms, turns = record.agent_count("model_latency_ms"), record.turns
        total.append((record.latency_ms - slept_ms) / turns)
        client.append((model_ms - slept_ms) / turns)
        env_runner.append((record.latency_ms - model_ms) / turns)
    figures = {
        "episodes": len(records),
        "overhead_per_turn_median_ms": round(statistics.median(total), 1),
        "overhead_per_turn_mean_ms": round(statistics.fmean(total), 1),
        "of_which_model_client_mean_ms": round(statistics.fmean(client), 1),
        "of_which_env_and_runner_mean_ms": round(statistics.fmean(env_runner), 1),
    }
    if delay:
        figures["overhead_fraction_of_turn"] = round(figures["overhead_per_turn_mean_ms"] / (1000 * delay), 4)
        env_runner_mean = figures["of_which_env_and_runner_mean_ms"]
        figures["env_and_runner_fraction_of_turn"] = round(env_runner_mean / (1000 * delay), 4)
    return figures


def prompt_tokens_evaluated(server_log: str) -> list[int]:
    """Prompt tokens llama.cpp actually evaluated, per request, from its server log (the rest of each
    prompt was reused from the KV cache)."""
    return [int(n) for n in re.findall(r"prompt eval time = .*?/\s*(\d+) tokens", server_log)]


def measure_local(episodes: int, concurrency: int) -> dict[str, Any]:
    """``episodes`` fc episodes of up to 3 turns on the embedded server at ``concurrency``: turns per
    minute, and prompt tokens evaluated per turn against the prompt tokens sent."""
    from hopgym.agents.model.local_server import local_model_string, local_server

    with local_server() as server, tempfile.TemporaryDirectory() as folder:
        config = EvalConfig(
            out=Path(folder) / "run",
            model=ModelConfig(
                local_model_string(), api_base=server.api_base, api_key="sk", max_tokens=128, timeout=600
            ),
            env_kwargs={"max_turns": 3},
            agent_options={"tool_choice": "required"},
            concurrency=concurrency,
            limit=episodes,
            progress=False,
        )
        started = time.perf_counter()
        EvalRun(config).run()
        wall = time.perf_counter() - started
        records = read_episodes(config.out / "episodes.jsonl")
        log = server.log_path.read_text(errors="replace")
    evaluated = prompt_tokens_evaluated(log)[1:]  # the first request is the server's self-check
    requests = sum(record.agent_count("requests") for record in records)
    sent = sum(record.agent_count("prompt_tokens") for record in records)
    return {
        "episodes": len(records),
        "concurrency": concurrency,
        "errors": sum(record.error is not None for record in records),
        "turns": requests,
        "wall_s": round(wall, 1),
        "turns_per_minute": round(60 * requests / wall, 2),
        "prompt_tokens_sent_per_turn": round(sent / max(requests, 1)),
        "prompt_tokens_evaluated_per_turn": round(sum(evaluated) / max(len(evaluated), 1)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turn-seconds", type=float, default=1.0)
    parser.add_argument("--jitter", type=float, default=0.5, help="spread of a turn, as a fraction of it")
    parser.add_argument("--local", type=int, default=0, help="also run N episodes with the local model")
    parser.add_argument(
        "--local-concurrency",
        type=int,
        action="append",
        help="episodes at once on the local model; repeat to compare (default: 1, eval's default)",
    )
    parser.add_argument("--local-only", action="store_true", help="skip the scripted-server figures")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    parser.add_argument("--model", action="append", help="the client's model (default openai/scripted)")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    models = args.model or ["openai/scripted"]
    series = {
        "zero_latency": (0.0, 0.0),
        "realistic": (args.turn_seconds, args.jitter),
        "lock_step": (args.turn_seconds, 0.0),
    }
    for name, (delay, jitter) in [] if args.local_only else series.items():
        figures = {model: measure(args.episodes, args.concurrency, delay, jitter, model) for model in models}
        report[name] = figures if len(models) > 1 else figures[models[0]]
    if args.local:
        report["local"] = [measure_local(args.local, k) for k in args.local_concurrency or [1]]
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
