"""Env steps per second and per-step latency, scripted policy: in process, through verifiers and through the
OpenEnv server; the server's added latency against openenv's own floor; ``env.step`` against the raw sandbox.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_serve.py [--concurrency 1,64,256]
[--rounds 4]`` (needs ``hopgym[serve]`` and ``hopgym[verifiers]``). Prints one JSON object:
- ``in_process`` / ``verifiers`` / ``server`` / ``server_stock_client`` / ``noop_server``: for each number of
  concurrent episodes, steps/s and the median, p90 and p99 of one step as the policy sees it. In process:
  ``Rollouts``, a worker thread per step. Verifiers: hopgym's verifiers env driven by verifiers' own
  ``rollout`` loop, its model call replaced by the scripted policy (a step: from the model's reply to the next
  model call). Server: ``hopgym serve env`` as a subprocess, one ``HopgymEnvClient`` WebSocket session per
  episode (delta frames); stock client: the same server through OpenEnv's ``GenericEnvClient`` (whole
  observations, plain dicts). No-op server: hopgym's client, openenv's app and the same uvicorn settings and
  session room over an openenv ``MCPEnvironment`` that does nothing, in the same frame shape (openenv's own
  round trip: the floor under any env served through it). The servers have room for twice the highest
  level (``--max-sessions``: a round's sessions may still be closing when the next round opens its own);
- ``server_added_ms``: server median minus in-process median, per step; ``floor_ms``: the no-op server's
  median; ``hopgym_added_ms``: what is left of the added latency above the floor (hopgym's own part);
- with ``--baseline CHECKOUT``: ``server_baseline``, the same server run from that checkout's code (e.g. the
  commit before a change; the client is this one's), ``server_ratio``: this checkout's median over the
  baseline's, per concurrency, and ``env_step_vs_sandbox_baseline``;
- ``env_step_vs_sandbox``: ``env.step`` with one valid call, warm (ToolHop's official protocol), against the
  raw sandbox call of a small tool, in blocks alternating with the raw calls, each block in a fresh process
  (target: at most 2x).
Every side is measured in ``--rounds`` rounds, sides alternating in order within each, so that the machine's
drifting load falls on all of them; figures pool all rounds. Each episode calls the task's first tool
(placeholder arguments) for ``--turns`` turns, then answers. ``--loop uvloop`` runs this process's sides
(the policy's and the clients' event loop: the trainer's) on uvloop instead of asyncio's own loop; the
servers run on uvicorn's loop (uvloop) either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import percentile, report, warm_call_latencies
from bench_env import warm_step_latencies

from hopgym.agents.model.scripted_server import placeholder_arguments
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.messages import tool_call
from hopgym.sandbox import make_sandbox
from hopgym.serving.openenv_client import HopgymEnvClient
from hopgym.serving.openenv_types import HopgymAction, HopgymObservation, HopgymState
from hopgym.serving.rollouts import Rollouts

if TYPE_CHECKING:
    from openenv.core.generic_client import GenericEnvClient

READY = re.compile(r"^ready: --base-url (\S+)$")
Samples = tuple[list[float], float]
"""Each timed step's latency in ms, and the timed episodes' wall time in s."""


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
        "p99_ms": round(percentile(step_ms, 0.99), 3),
    }


ENV_KWARGS = {"protocol": "hopgym"}


async def in_process(concurrency: int, episodes: int, turns: int) -> Samples:
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

    kwargs = {**ENV_KWARGS, "max_turns": turns + 1}
    async with Rollouts("ToolHop-v0", kwargs, concurrency) as rollouts:
        await rollouts.run(policy, [{"index": i % 100} for i in range(concurrency)])  # warm-up
        step_ms.clear()
        started = time.perf_counter()
        results = await rollouts.run(policy, [{"index": i % 100} for i in range(episodes)])
        seconds = time.perf_counter() - started
    assert all(result.error is None for result in results), [r.error for r in results if r.error]
    return step_ms, seconds


async def through_verifiers(concurrency: int, episodes: int, turns: int) -> Samples:
    """verifiers' own ``rollout`` loop over hopgym's verifiers env, ``concurrency`` rollouts at once, the
    model replaced by the scripted policy; the first ``concurrency`` rollouts (making the envs) untimed."""
    import verifiers as vf

    from hopgym.serving.verifiers_env import HopgymEnv

    step_ms: list[float] = []
    replied: dict[str, float] = {}

    class Scripted(HopgymEnv):
        async def get_model_response(self, state: vf.State, prompt: vf.Messages, *_: Any, **__: Any) -> Any:
            now = time.perf_counter()
            if state["trajectory_id"] in replied:
                step_ms.append((now - replied[state["trajectory_id"]]) * 1000)
            tools = [{"function": tool.model_dump()} for tool in state["tool_defs"]]
            chosen = action({"messages": [dict(m) for m in prompt], "tools": tools}, turns)
            calls = [] if isinstance(chosen, str) else chosen["tool_calls"]
            message = vf.ResponseMessage(
                content=chosen if isinstance(chosen, str) else None,
                tool_calls=[
                    vf.ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                    for c in calls
                ]
                or None,
                finish_reason="tool_calls" if calls else "stop",
                is_truncated=False,
            )
            replied[state["trajectory_id"]] = time.perf_counter()
            return vf.Response(id="scripted", created=0, model="scripted", message=message)

    env = Scripted(Rollouts("ToolHop-v0", {**ENV_KWARGS, "max_turns": turns + 1}, concurrency))
    rows = env.get_eval_dataset()
    client = vf.ClientConfig(api_base_url="http://127.0.0.1:9/v1", api_key_var="PATH")  # never called
    queue: list[int] = []

    async def play() -> None:
        while queue:
            row = rows[queue.pop() % len(rows)]
            input = {"prompt": row["prompt"], "info": row["info"], "example_id": 0}
            state = await env.rollout(input, client, "scripted")
            assert state.get("error") is None, state["error"]

    try:
        queue[:] = range(concurrency)
        await asyncio.gather(*(play() for _ in range(concurrency)))
        queue[:] = range(episodes)
        step_ms.clear()
        started = time.perf_counter()
        await asyncio.gather(*(play() for _ in range(concurrency)))
        return step_ms, time.perf_counter() - started
    finally:
        await env.close_envs()


Client: TypeAlias = "type[HopgymEnvClient] | type[GenericEnvClient]"


async def server_steps(url: str, kind: Client, concurrency: int, episodes: int, turns: int) -> Samples:
    """``concurrency`` sessions of clients of ``kind``, opened (their envs made) and warmed up before the
    timed episodes. hopgym's client gets delta frames and parses them into a ``HopgymObservation``;
    OpenEnv's stock ``GenericEnvClient`` gets whole observations as dicts."""
    step_ms: list[float] = []
    queue: list[int] = []

    async def play(client: HopgymEnvClient | GenericEnvClient) -> None:
        while queue:
            result = await client.reset(index=queue.pop() % 100)
            while not result.done:
                seen = result.observation
                chosen = HopgymAction.of(action(seen if isinstance(seen, dict) else seen.model_dump(), turns))
                started = time.perf_counter()
                result = await client.step(chosen)
                step_ms.append((time.perf_counter() - started) * 1000)

    clients = [kind(url) for _ in range(concurrency)]
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


def noop_app(turns: int, max_sessions: int) -> Any:
    """openenv's app over openenv's ``MCPEnvironment`` (the base of hopgym's served env: the same session
    setup, MCP session and thread hop per step) doing nothing: a reset offers one tool, each step answers
    with one short tool message in hopgym's delta-frame shape (the new messages, the tools left out), and
    the episode ends after ``turns`` of them (what the client's policy expects), so that only openenv,
    uvicorn and the client are measured."""
    from fastmcp import FastMCP

    from hopgym.serving.asgi_middleware import QuietClose
    from hopgym.serving.openenv_core import MCPEnvironment, create_app

    tool = {
        "type": "function",
        "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}},
    }

    class Noop(MCPEnvironment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__(FastMCP("noop"))
            self._turn = 0

        def reset(
            self, seed: int | None = None, episode_id: str | None = None, **_: Any
        ) -> HopgymObservation:
            self._turn = 0
            return self._observation([{"role": "user", "content": "go"}], 0)

        def _step_impl(
            self, action: HopgymAction, timeout_s: float | None = None, **_: Any
        ) -> HopgymObservation:
            self._turn += 1
            messages = [action.message(), {"role": "tool", "tool_call_id": "b", "content": "ok"}]
            return self._observation(messages, 2 * self._turn - 1)

        def _observation(self, messages: list[dict[str, Any]], start: int) -> HopgymObservation:
            done = self._turn > turns
            return HopgymObservation(
                messages=messages, messages_from=start, tools=[] if start else [tool], same_tools=start > 0,
                info={"turn": self._turn}, reward=0.0, done=done, terminated=done, truncated=False,
            )  # fmt: skip

        @property
        def state(self) -> HopgymState:
            return HopgymState(env_id="noop")

    app = create_app(Noop, HopgymAction, HopgymObservation, max_concurrent_envs=max_sessions)
    return QuietClose(app)  # as hopgym's server: a client's close ends a session without a traceback


def serve_noop(turns: int, max_sessions: int) -> None:
    """The no-op server on a free port of 127.0.0.1 (``--noop-server``), with ``hopgym serve env``'s
    uvicorn settings; prints the same ready line."""
    from hopgym.serving.openenv_server import uvicorn_server

    listener = socket.create_server(("127.0.0.1", 0), backlog=2048)
    print(f"ready: --base-url http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    uvicorn_server(noop_app(turns, max_sessions)).run(sockets=[listener])


def serve(command: list[str], checkout: str | None = None) -> tuple[subprocess.Popen, str]:
    """A server subprocess that prints the ready line: with ``checkout``, that checkout's code."""
    environment = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())} if checkout else None
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
    assert server.stdout is not None
    match = READY.match(server.stdout.readline().strip())
    assert match, f"{command} did not start"
    return server, match.group(1)


def hopgym_server(max_sessions: int, turns: int) -> list[str]:
    """``hopgym serve env`` with room for ``max_sessions`` and as many more still closing from a round
    before (the server closes a session's env after its client has gone)."""
    command = [sys.executable, "-m", "hopgym.cli", "serve", "env", "--max-sessions", str(2 * max_sessions)]
    return [*command, "--env-arg", "protocol=hopgym", "--env-arg", f"max_turns={turns + 1}"]


def noop_server(max_sessions: int, turns: int) -> list[str]:
    """The no-op server (:func:`noop_app`) with the same room as :func:`hopgym_server`."""
    return [
        sys.executable,
        __file__,
        "--noop-server",
        "--turns",
        str(turns),
        "--max-sessions",
        str(2 * max_sessions),
    ]


def stop(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=120)


Side = Callable[[int, int, int], Awaitable[Samples]]


def over_the_wire(url: str, kind: Client = HopgymEnvClient) -> Side:
    return lambda concurrency, episodes, turns: server_steps(url, kind, concurrency, episodes, turns)


def measure(
    sides: dict[str, Side], levels: list[int], episodes: int, turns: int, rounds: int, loop: str
) -> dict[str, Any]:
    """Every side at every level, in ``rounds`` rounds whose order of sides alternates, each on a new event
    loop of the kind ``loop`` names; each side's figures pool its rounds."""
    run: Callable[[Any], Samples] = asyncio.run
    if loop == "uvloop":
        import uvloop

        run = uvloop.run
    out: dict[str, dict[int, Any]] = {side: {} for side in sides}
    for level in levels:
        samples: dict[str, Samples] = {side: ([], 0.0) for side in sides}
        for round_number in range(rounds):
            order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
            for side in order:
                step_ms, seconds = run(sides[side](level, level * episodes, turns))
                samples[side] = (samples[side][0] + step_ms, samples[side][1] + seconds)
        for side in sides:
            out[side][level] = figures(*samples[side])
    return out


def env_step_block(calls: int) -> None:
    """One block of ``env.step`` (one valid call, warm) and raw sandbox calls, in this process
    (``--env-step-block``); prints the latencies as JSON."""
    env = ToolHopEnv(max_turns=10**9)
    try:
        with make_sandbox("process") as sandbox:
            _, step_ms, record_ms = warm_step_latencies(env, calls)
            raw_ms = warm_call_latencies(sandbox, calls)
    finally:
        env.close()
    print(json.dumps({"step_ms": step_ms, "record_ms": record_ms, "raw_ms": raw_ms}))


def env_step_vs_sandbox(calls: int, rounds: int, baseline: str | None) -> dict[str, Any]:
    """``env.step`` against the raw sandbox call, in ``rounds`` blocks, each in a fresh process; with
    ``baseline``, that checkout's blocks alternate with this one's."""
    sides = {"this": None, **({"baseline": baseline} if baseline else {})}
    samples: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for round_number in range(rounds):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for side in order:
            checkout = sides[side]
            environment = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())} if checkout else None
            command = [sys.executable, __file__, "--env-step-block", str(calls // rounds)]
            done = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
            for key, values in json.loads(done.stdout.splitlines()[-1]).items():
                samples[side][key] = samples[side].get(key, []) + values
    out = {}
    for side, latencies in samples.items():
        step, raw = statistics.median(latencies["step_ms"]), statistics.median(latencies["raw_ms"])
        out["env_step_vs_sandbox" if side == "this" else "env_step_vs_sandbox_baseline"] = {
            "env_step_median_ms": round(step, 3),
            "env_step_p90_ms": round(percentile(latencies["step_ms"], 0.9), 3),
            "call_record_latency_median_ms": round(statistics.median(latencies["record_ms"]), 3),
            "raw_sandbox_call_median_ms": round(raw, 3),
            "ratio": round(step / raw, 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,64,256", help="comma list of concurrent episodes")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per concurrent slot and round")
    parser.add_argument("--turns", type=int, default=20, help="tool-calling turns per episode")
    parser.add_argument("--calls", type=int, default=2000, help="warm calls for env.step vs sandbox")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    parser.add_argument("--baseline", help="also run the server from this checkout")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side (sides alternate)")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the clients' loop")
    parser.add_argument("--noop-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--max-sessions", type=int, default=512, help=argparse.SUPPRESS)
    parser.add_argument("--env-step-block", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.noop_server:
        serve_noop(args.turns, args.max_sessions)
        return
    if args.env_step_block:
        env_step_block(args.env_step_block)
        return
    levels = [int(level) for level in args.concurrency.split(",")]
    result: dict[str, Any] = {"turns": args.turns, "rounds": args.rounds, "loop": args.loop}
    result.update(env_step_vs_sandbox(args.calls, args.rounds, args.baseline))
    servers = {
        "server": serve(hopgym_server(max(levels), args.turns)),
        "noop_server": serve(noop_server(max(levels), args.turns)),
    }
    if args.baseline:
        servers["server_baseline"] = serve(hopgym_server(max(levels), args.turns), args.baseline)
    sides: dict[str, Side] = {"in_process": in_process, "verifiers": through_verifiers}
    sides.update({name: over_the_wire(url) for name, (_, url) in servers.items()})
    from openenv.core.generic_client import GenericEnvClient  # openenv.core is loaded, without Gradio

    sides["server_stock_client"] = over_the_wire(servers["server"][1], GenericEnvClient)
    try:
        result.update(measure(sides, levels, args.episodes, args.turns, args.rounds, args.loop))
    finally:
        for process, _ in servers.values():
            stop(process)
    for key in (
        "server_added_ms",
        "floor_ms",
        "hopgym_added_ms",
        *(["server_ratio"] if args.baseline else []),
    ):
        result[key] = {}
    for level in levels:
        median = {side: result[side][level]["median_ms"] for side in sides}
        result["server_added_ms"][level] = round(median["server"] - median["in_process"], 3)
        result["floor_ms"][level] = median["noop_server"]
        result["hopgym_added_ms"][level] = round(
            median["server"] - median["in_process"] - median["noop_server"], 3
        )
        if args.baseline:
            result["server_ratio"][level] = round(median["server"] / median["server_baseline"], 3)
    report(result, args.out)


if __name__ == "__main__":
    main()
