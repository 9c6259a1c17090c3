"""``hopgym serve env`` as a real subprocess, driven by OpenEnv's own client code (``EnvClient`` subclassed by
hopgym's typed client) over WebSocket: results equal to in-process ``env.step``, sessions at once, a killed
client's sandbox workers gone (read in /proc), garbage frames answered per session, the session cap, the API
key, and a refused start on an open address without one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from tests.extras import require_extra

require_extra("openenv.core", "serve")
# hopgym's OpenEnv client and action (openenv.core loads FastAPI, MCP and Gradio: seconds) are imported by the
# functions that use them, so that the xdist workers not running them do not load them while collecting.

from websockets.asyncio.client import connect  # noqa: E402 - after the extra is known to be there

from hopgym.errors import EnvServerError  # noqa: E402
from tests.servers import ENV_SERVER_READY, descendants, env_server, env_server_in_thread, hopgym, wait_until  # noqa: E402
from tests.toolhop_episodes import Outcome, in_process, outcome, over_the_server, policy  # noqa: E402

EPISODES = 100
SESSIONS = 8


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen]]:
    with env_server("--max-sessions", str(SESSIONS)) as running:
        yield running


def test_100_episodes_over_8_sessions_equal_in_process_steps(server: tuple[str, subprocess.Popen]) -> None:
    url, process = server
    remote = asyncio.run(over_the_server(url, range(EPISODES), SESSIONS))
    assert remote == in_process(range(EPISODES))
    statuses = {call[2] for steps in remote for step in steps for call in step[3]}
    assert {"ok", "tool_hallucination", "parameter_missing"} <= statuses
    assert any(step[2] for steps in remote for step in steps)  # some answers are correct
    assert wait_until(lambda: descendants(process.pid) == [])  # every session's workers are gone


def test_a_step_sends_only_new_messages_and_the_client_rebuilds_the_whole_chat(
    server: tuple[str, subprocess.Popen],
) -> None:
    """The client's chat and tools equal the in-process observation's at every step, while each step's
    frame of a session that asked for delta frames (as hopgym's client does) carries only the messages the
    session had not seen (``messages_from`` says where they start) and
    no tools when they are the ones sent before (``same_tools``)."""
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction, HopgymObservation

    url, _ = server
    env = gym.make("ToolHop-v0")
    try:
        expected, (observation, _) = [], env.reset(options={"index": 2})
        expected.append(observation["messages"])
        tools = observation["tools"]
        actions = [policy(observation, 0), policy(observation, 3)]  # a real tool, then an unknown one
        for chosen in [*actions, "Final answer: x"]:
            observation, *_ = env.step(chosen)
            expected.append(observation["messages"])
            assert observation["tools"] == tools
    finally:
        env.close()

    async def over_both() -> tuple[list[HopgymObservation], list[dict[str, Any]]]:
        async with HopgymEnvClient(url) as client:
            results = [await client.reset(index=2)]
            for chosen in [*actions, "Final answer: x"]:
                results.append(await client.step(HopgymAction.of(chosen)))
        async with connect(url.replace("http://", "ws://") + "/ws") as ws:
            frames = []
            for message in [{"type": "reset", "data": {"index": 2, "delta_frames": True}}] + [
                {"type": "step", "data": HopgymAction.of(a).model_dump(exclude_none=True)} for a in actions
            ]:
                await ws.send(json.dumps(message))
                frames.append(json.loads(await ws.recv())["data"]["observation"])
        return [r.observation for r in results], frames

    observations, frames = asyncio.run(over_both())
    assert [o.messages for o in observations] == expected
    assert all(o.tools == tools and not o.same_tools for o in observations)
    assert [f["messages_from"] for f in frames] == [0, len(expected[0]), len(expected[1])]
    assert [(f["tools"], f["same_tools"]) for f in frames] == [(tools, False), ([], True), ([], True)]
    assert [f["messages"] for f in frames] == [
        expected[0],
        expected[1][len(expected[0]) :],
        expected[2][len(expected[1]) :],
    ]


CLIENT = """
import asyncio, json, sys
from websockets.asyncio.client import connect

async def main():
    async with connect(sys.argv[1].replace("http://", "ws://") + "/ws") as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"index": 0}}))
        tools = json.loads(await ws.recv())["data"]["observation"]["tools"]
        call = {"name": tools[0]["function"]["name"], "arguments": {}}
        await ws.send(json.dumps({"type": "step", "data": {"tool_calls": [call]}}))
        assert json.loads(await ws.recv())["type"] == "observation"
        print("stepped", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_killed_client_leaves_no_worker_process(server: tuple[str, subprocess.Popen]) -> None:
    url, process = server
    client = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "stepped"
        assert descendants(process.pid), "the session's sandbox holds no worker: nothing to check"
        client.kill()
        client.wait(timeout=10)
        assert wait_until(lambda: descendants(process.pid) == []), descendants(process.pid)
    finally:
        client.kill()
        client.wait()


@contextlib.asynccontextmanager
async def session_when_free(url: str, index: int, patience: float = 120.0) -> AsyncIterator[tuple[Any, Any]]:
    """A client and its first reset, once the server has a place: a closed session's place comes back once
    the server has closed its env (hopgym's pool) and openenv has dropped the session (openenv's own cap),
    which under load may be later than a client that saw its workers go asks."""
    from hopgym.serving.openenv_client import HopgymEnvClient

    give_up = time.monotonic() + patience
    while True:
        async with HopgymEnvClient(url) as client:
            try:
                result = await client.reset(index=index)
            except EnvServerError as exc:
                if "at capacity" not in str(exc) or time.monotonic() > give_up:
                    raise
            else:
                yield client, result
                return
        await asyncio.sleep(0.1)


def test_an_idle_session_is_closed_with_its_sandbox_and_socket_and_the_client_says_why() -> None:
    """``--session-timeout 2``: a session left waiting loses its env, its sandbox workers (read in /proc),
    its place (one, ``--max-sessions 1``) and its socket, and its client's next step says why; a session
    that keeps stepping for longer than the timeout is never closed (its silences are milliseconds)."""
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction

    timeout = 2.0
    with env_server("--max-sessions", "1", "--session-timeout", f"{timeout:g}") as (url, process):

        async def scenario() -> str:
            async with HopgymEnvClient(url) as idle:
                result = await idle.reset(index=0)
                await idle.step(HopgymAction.of(policy(result.observation.model_dump(), 0)))
                assert descendants(process.pid), "the session's sandbox holds no worker: nothing to check"
                gone = await asyncio.to_thread(wait_until, lambda: descendants(process.pid) == [], 120.0)
                assert gone, descendants(process.pid)
                with pytest.raises(EnvServerError) as closed:
                    await idle.reset(index=1)
            async with session_when_free(url, index=2) as (busy, result):  # the one place is free again
                started = time.monotonic()
                while time.monotonic() - started < 2 * timeout:
                    if result.done:
                        result = await busy.reset(index=2)
                    while not result.done:
                        result = await busy.step(HopgymAction.of(policy(result.observation.model_dump(), 2)))
            return str(closed.value)

        message = asyncio.run(scenario())
    assert "--session-timeout" in message and "close code 4408" in message, message


GARBAGE: list[str | bytes] = [
    "not json",
    "[1, 2]",
    "null",
    '{"type": 5}',
    '{"type": "teleport"}',
    '{"type": "step"}',
    '{"type": "step", "data": {"tool_calls": "all of them"}}',
    '{"type": "step", "data": {"role": "user", "content": "hi"}}',
    '{"type": "step", "data": {"content": 7}}',
    '{"type": "reset", "data": {"index": 100000}}',
    '{"type": "reset", "data": {"task_id": "nope"}}',
    '{"type": "reset", "data": {"options": {"index": 0}, "sandbox": "none"}}',
    '{"type": "reset", "data": {"seed": "abc"}}',
    '{"type": "state", "extra": 1}',
    '{"type": "mcp", "data": {"jsonrpc": "1.0"}}',
    "{" * 10000,
    b"\x00\xff binary frame",
    "x" * 200_000,
]


async def send_garbage(url: str, frames: int) -> list[str]:
    """Send ``frames`` garbage frames, reconnecting whenever the server ends a session; return the error
    codes it answered with."""
    codes: list[str] = []
    ws_url = url.replace("http://", "ws://") + "/ws"
    sent = 0
    while sent < frames:
        async with connect(ws_url, max_size=None) as ws:
            with contextlib.suppress(Exception):
                while sent < frames:
                    frame = GARBAGE[sent % len(GARBAGE)]
                    sent += 1
                    await ws.send(frame)
                    reply = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                    codes.append(reply["data"]["code"] if reply["type"] == "error" else reply["type"])
    return codes


def test_200_garbage_frames_leave_the_server_serving_and_other_sessions_untouched(
    server: tuple[str, subprocess.Popen],
) -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction

    url, process = server

    async def scenario() -> tuple[list[str], Outcome, Outcome]:
        async with HopgymEnvClient(url) as bystander:
            result = await bystander.reset(index=7)
            codes = await send_garbage(url, 200)
            steps = []
            while not result.done:
                result = await bystander.step(HopgymAction.of(policy(result.observation.model_dump(), 7)))
                steps.append(outcome(float(result.reward or 0), result.done, result.observation.info))
        after = await over_the_server(url, range(3), 1)
        return codes, steps, after[0]

    codes, bystander, after = asyncio.run(scenario())
    assert len(codes) >= 150 and {"INVALID_JSON", "EXECUTION_ERROR", "VALIDATION_ERROR"} <= set(codes)
    expected = in_process(range(8))
    assert bystander == expected[7] and after == expected[0]
    assert process.poll() is None
    assert wait_until(lambda: descendants(process.pid) == [])


def test_a_session_past_the_cap_is_refused_with_a_message(server: tuple[str, subprocess.Popen]) -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient

    url, _ = server

    async def scenario() -> str:
        clients = [HopgymEnvClient(url) for _ in range(SESSIONS)]
        try:
            for client in clients:
                await client.connect()
                await client.reset(index=0)
            with pytest.raises(EnvServerError) as refused:
                async with HopgymEnvClient(url) as extra:
                    await extra.reset(index=0)
            await clients[0].close()  # its place is free again once the server has closed its env
            async with HopgymEnvClient(url) as replacement:
                for _ in range(100):
                    with contextlib.suppress(EnvServerError):
                        assert (await replacement.reset(index=1)).observation.info["turn"] == 0
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("no place came free after a session closed")
            return str(refused.value)
        finally:
            for client in clients:
                await client.close()

    message = asyncio.run(scenario())
    assert "capacity" in message and f"{SESSIONS}/{SESSIONS}" in message and "CAPACITY_REACHED" in message


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--host", "0.0.0.0"], "--api-key"),
        (["--env", "ToolHopp-v0"], "did you mean 'ToolHop-v0'"),
        (["--env-arg", "scenarioo=free"], "scenarioo"),
        (["--max-sessions", "0"], "--max-sessions"),
    ],
)
def test_a_server_that_cannot_serve_as_asked_refuses_to_start_and_says_why(
    flags: list[str], named: str
) -> None:
    refused = subprocess.run(hopgym("serve", "env", *flags), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and named in refused.stderr and "ready:" not in refused.stdout


def open_file_limits(soft: int, hard: int) -> Callable[[], None]:
    """A ``preexec_fn`` starting the server with these open-file limits (a machine's ``ulimit -n``)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_server_raises_its_open_file_limit_to_what_its_sessions_need() -> None:
    """Soft 512, hard 4,096 (a session holds 13 files: 512 would fail the 40th): 100 sessions get 1,856."""
    command = hopgym("serve", "env", "--max-sessions", "100")
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, preexec_fn=open_file_limits(512, 4096)
    ) as server:
        try:
            assert server.stdout is not None and ENV_SERVER_READY.match(server.stdout.readline().strip())
            limits = Path(f"/proc/{server.pid}/limits").read_text()
            assert re.search(r"^Max open files\s+1856\s+4096\s+files", limits, re.MULTILINE), limits
        finally:
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 130


def test_a_server_whose_hard_open_file_limit_cannot_hold_its_sessions_refuses_to_start() -> None:
    refused = subprocess.run(
        hopgym("serve", "env", "--max-sessions", "100"),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=open_file_limits(1024, 1024),
    )
    assert refused.returncode == 2 and "ready:" not in refused.stdout
    assert "--max-sessions 100 needs about 1856 open files" in refused.stderr
    assert "at most 1024" in refused.stderr and "lower --max-sessions to 48" in refused.stderr


def test_an_api_key_guards_every_route_but_health() -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient

    with env_server_in_thread("s3cret") as url:
        assert urllib.request.urlopen(f"{url}/health").status == 200
        with pytest.raises(urllib.error.HTTPError) as unauthorized:
            urllib.request.urlopen(f"{url}/schema")
        assert unauthorized.value.code == 401

        async def scenario() -> None:
            for wrong in ("wrong", None):
                with pytest.raises((EnvServerError, ConnectionError)):
                    async with HopgymEnvClient(url, api_key=wrong) as client:
                        await client.reset(index=0)
            async with HopgymEnvClient(url, api_key="s3cret") as client:
                result = await client.reset(index=0)
                assert result.observation.info["isolation"].startswith(("bwrap", "namespaces"))

        asyncio.run(scenario())


def test_a_reset_frame_without_tools_is_an_error_not_the_last_episodes_tools() -> None:
    """A reset's frame always carries its tools; one that says "the same tools" (a server that lost track of
    what it sent) must fail loudly rather than leave the client offering the last task's tools."""
    from hopgym.serving.openenv_client import HopgymEnvClient

    tools = [{"type": "function", "function": {"name": "last_task_tool", "parameters": {"type": "object"}}}]
    frames = [
        {"messages": [{"role": "user", "content": "q1"}], "tools": tools},
        {"messages": [{"role": "user", "content": "q2"}], "tools": [], "same_tools": True},
    ]

    class Replayed(HopgymEnvClient):
        async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
            observation = {"messages_from": 0, "same_tools": False, "info": {}, **frames.pop(0)}
            data = {"observation": observation, "reward": None, "done": False}
            return {"type": "observation", "data": data}

    async def two_resets() -> None:
        client = Replayed("http://127.0.0.1:9")  # never connects: the frames are replayed
        first = await client.reset()
        assert first.observation.tools == tools
        with pytest.raises(EnvServerError, match="same tools as before, but this session holds none"):
            await client.reset()

    asyncio.run(two_resets())
