"""A model server's reply is hostile input: whatever it sends, a request ends within its deadline, reads at
most the reply cap, and a run records the episode's error and goes on. Attacked through real HTTP servers
on 127.0.0.1 (tests/hostile_model_server.py) on each route of the model client: the openai client, litellm
over the openai client, and litellm's own HTTP handler (``hosted_vllm/``)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.model.client import ModelClient, ModelConfig, _LitellmSender, _OpenAISender
from hopgym.errors import ModelError, ReplyRefusedError
from tests import hostile_model_server as hostile
from tests.hostile_model_server import HostileModelServer

USER = [{"role": "user", "content": "hi"}]
CAP = 64 * 1024
ROUTES = ["openai", "litellm", "litellm-http"]


def client_for(server: HostileModelServer, route: str, **overrides: Any) -> ModelClient:
    """The model client on ``route``: ``openai/`` through the openai client or, with its sender swapped,
    through litellm's openai client; ``hosted_vllm/`` through litellm's own HTTP handler."""
    options = {"timeout": 1.0, "max_retries": 1, "backoff_base": 0.01, "max_reply_bytes": CAP, **overrides}
    model = "hosted_vllm/hostile" if route == "litellm-http" else server.model
    client = ModelClient(ModelConfig(model, api_base=server.api_base, api_key="sk", **options))
    assert isinstance(client._sender, _LitellmSender if route == "litellm-http" else _OpenAISender)
    if route == "litellm":
        client._sender = _LitellmSender("sk")
    return client


def ask(client: ModelClient) -> tuple[BaseException | str, float]:
    """The reply's content, or the error the request ended with; and the seconds it took."""
    started = time.monotonic()
    try:
        outcome: BaseException | str = asyncio.run(client.complete(USER)).message["content"]
    except ModelError as exc:
        outcome = exc
    return outcome, time.monotonic() - started


@pytest.fixture(params=ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_server_trickling_a_byte_a_second_is_cut_at_the_deadline_and_retried_a_bounded_number_of_times(
    route: str,
) -> None:
    """The reply would take 20 minutes; each attempt ends after its 1 s deadline, and after 2 attempts the
    request ends with the reason."""
    with HostileModelServer(hostile.trickle) as server:
        outcome, seconds = ask(client_for(server, route))
        attempts = len(server.requests)
    assert isinstance(outcome, ModelError) and not isinstance(outcome, ReplyRefusedError)
    assert "gave up after 2 attempts: no whole reply within 1 s (the deadline, --timeout)" in str(outcome)
    assert attempts in (1, 2)  # the deadline covers litellm's own preparation too, slow on its first call
    assert seconds < 20  # 2 x 1 s of deadline; a margin for a slow machine, never the reply's 20 minutes


@pytest.mark.parametrize(
    "behaviour",
    [hostile.endless, hostile.huge(declared=False), hostile.huge(declared=True)],
    ids=["endless-body", "50MiB-chunked", "50MiB-declared"],
)
def test_a_reply_over_the_cap_is_cut_and_not_asked_again(route: str, behaviour: hostile.Behaviour) -> None:
    with HostileModelServer(behaviour) as server:
        outcome, seconds = ask(client_for(server, route, timeout=30.0))
        attempts = len(server.requests)
    assert isinstance(outcome, ReplyRefusedError), outcome
    assert str(outcome).endswith(f"the reply is larger than {CAP} bytes (the cap, --max-reply-bytes)")
    assert attempts == 1  # the server answered: asking again would cost another cap of bytes
    assert seconds < 20  # cut at the cap, not at the 30 s deadline


def test_a_compressed_reply_is_refused_before_it_is_decoded(route: str) -> None:
    """50 MiB gzipped into ~50 KiB: under the cap as sent, so the cap alone would not stop its decoding."""
    with HostileModelServer(hostile.gzip_bomb()) as server:
        outcome, _ = ask(client_for(server, route))
        asked = server.requests
    assert isinstance(outcome, ReplyRefusedError), outcome
    assert "the reply is compressed (gzip) though none was asked for" in str(outcome)
    assert len(asked) == 1


@pytest.mark.parametrize(
    "behaviour",
    [hostile.cut_mid_json, hostile.truncated_json, hostile.not_json],
    ids=["hung-up-mid-json", "truncated-json", "html"],
)
def test_a_broken_reply_ends_the_request_with_the_reason(route: str, behaviour: hostile.Behaviour) -> None:
    """Retried as a server error (litellm's own handler gives up on a body that is not JSON at once)."""
    with HostileModelServer(behaviour) as server:
        outcome, seconds = ask(client_for(server, route, timeout=10.0))
        attempts = len(server.requests)
    assert isinstance(outcome, ModelError) and not isinstance(outcome, ReplyRefusedError), outcome
    assert attempts == 2 if "gave up after 2 attempts" in str(outcome) else attempts == 1
    assert len(str(outcome)) < 1200  # the cause, not the reply (litellm quotes what it could not parse)
    assert seconds < 20


def test_a_reply_just_under_the_cap_is_read_and_one_just_over_is_not(route: str) -> None:
    envelope = len(hostile.completion(""))
    contents = []
    for size in (CAP - envelope, CAP - envelope + 1):
        with HostileModelServer(hostile.answer("y" * size)) as server:
            contents.append(ask(client_for(server, route))[0])
    assert contents[0] == "y" * (CAP - envelope)
    assert isinstance(contents[1], ReplyRefusedError)


def by_task(behaviours: dict[str, hostile.Behaviour], default: hostile.Behaviour) -> hostile.Behaviour:
    """The behaviour of the task whose question the request's messages hold, else ``default``."""

    def behave(request: dict[str, Any], sock: socket.socket) -> None:
        text = " ".join(str(message.get("content")) for message in request.get("messages", []))
        question = next((question for question in behaviours if question in text), None)
        (behaviours[question] if question else default)(request, sock)

    return behave


MEASURED_EVAL = """
import json, resource, sys
from hopgym.cli import main
import gymnasium, hopgym.agents.evaluation.runner, hopgym.agents.model.client, openai.resources.chat
started = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[1], "w") as handle:
    json.dump({"started_kib": started, "peak_kib": peak}, handle)
sys.exit(code)
"""
"""``hopgym eval`` with the peak memory of its process before the run (imports done) and at its end."""


def test_eval_records_each_hostile_reply_as_its_episode_error_and_stays_within_memory(
    tmp_path: Path,
) -> None:
    """One hostile behaviour per task (the last task answered properly), through ``hopgym eval``."""
    from hopgym.tasks.toolhop.loader import load_toolhop

    hostile_ones = [hostile.endless, hostile.trickle, hostile.huge(declared=False), hostile.gzip_bomb()]
    tasks = load_toolhop()[: len(hostile_ones) + 1]
    behaviours = {task.question: behaviour for task, behaviour in zip(tasks[:-1], hostile_ones, strict=True)}
    out, memory = tmp_path / "run", tmp_path / "memory.json"
    with HostileModelServer(by_task(behaviours, hostile.answer("Final answer: 42"))) as server:
        command = [
            sys.executable, "-c", MEASURED_EVAL, str(memory), "eval", "--env", "ToolHop-v0", "--agent", "fc",
            "--model", server.model, "--api-base", server.api_base, "--api-key", "sk", "--no-progress",
            "--limit", str(len(tasks)), "--concurrency", str(len(tasks)), "--out", str(out),
            "--timeout", "2", "--max-retries", "1", "--max-reply-bytes", str(CAP),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # some episodes reached the model and ended: the run's status
    assert "Traceback" not in done.stderr
    failed = f"hopgym: {len(hostile_ones)} of {len(tasks)} episodes failed"
    assert done.stderr.strip().splitlines()[-1].startswith(failed)
    records = {r["index"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}
    assert sorted(records) == list(range(len(tasks)))
    errors = [records[index]["error"] for index in range(len(tasks))]
    assert errors[0].startswith("ReplyRefusedError: ") and f"larger than {CAP} bytes" in errors[0]
    assert errors[1].startswith("ModelError: ") and "no whole reply within 2 s" in errors[1]
    assert errors[2].startswith("ReplyRefusedError: ") and f"larger than {CAP} bytes" in errors[2]
    assert errors[3].startswith("ReplyRefusedError: ") and "compressed (gzip)" in errors[3]
    assert errors[4] is None and records[4]["terminated"]
    used = json.loads(memory.read_text())
    growth_mib = (used["peak_kib"] - used["started_kib"]) / 1024
    # Uncapped, the endless body alone grows the process by GiBs within its deadline, and the 50 MiB reply
    # by ~390 MiB; capped, each holds at most 64 KiB. The bound leaves room for the run's own objects.
    assert growth_mib < 150, used


@pytest.mark.parametrize("declared", ["²", "٣", "9" * 5000])
def test_an_odd_content_length_is_read_as_digits_or_not_at_all(declared: str) -> None:
    """``"²".isdigit()`` holds and ``int("²")`` raises; 5,000 digits are past int()'s limit: each is either
    too large (refused, named) or not a length (the body is counted as it is read), never a ValueError."""
    import httpx

    from hopgym.agents.model import reply_limit
    from hopgym.errors import ReplyRefusedError

    # as bytes, as they come off the wire (httpx decodes a header's bytes itself)
    response = httpx.Response(200, headers=[(b"Content-Length", declared.encode())], content=b"{}")
    assert response.headers["Content-Length"] == declared
    with reply_limit.reply_limit(1 << 20):
        if declared.isascii():
            with pytest.raises(ReplyRefusedError):
                reply_limit._cap(response)
        else:
            reply_limit._cap(response)
