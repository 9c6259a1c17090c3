"""The host side of the worker protocol over real pipes: framing, deadlines and hostile output."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

from hopgym.errors import WorkerCrashedError, WorkerProtocolError, WorkerTimeoutError
from hopgym.sandbox.protocol import PipeWriter, WorkerConnection


@pytest.fixture
def pipes() -> Iterator[tuple[WorkerConnection, int, int]]:
    """A connection whose peer is two raw pipe ends: (connection, fd the worker writes, fd it reads)."""
    worker_to_host_r, worker_to_host_w = os.pipe()
    host_to_worker_r, host_to_worker_w = os.pipe()
    reader = os.fdopen(worker_to_host_r, "rb", buffering=0)
    writer = PipeWriter(os.fdopen(host_to_worker_w, "wb", buffering=0))
    connection = WorkerConnection(reader, writer, max_line_bytes=1024)
    yield connection, worker_to_host_w, host_to_worker_r
    connection.close()
    for fd in (worker_to_host_w, host_to_worker_r):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_messages_round_trip_across_partial_writes(pipes) -> None:
    connection, worker_out, worker_in = pipes
    connection.send({"op": "call", "name": "f", "arguments": {"text": "naïve \ud800"}}, time.monotonic() + 1)
    assert os.read(worker_in, 4096).endswith(b"\n")
    os.write(worker_out, b'{"type": "result", "val')
    os.write(worker_out, b'ue": 1}\n{"type": "pong"}\n')
    deadline = time.monotonic() + 1
    assert connection.receive(deadline) == {"type": "result", "value": 1}
    assert connection.receive(deadline) == {"type": "pong"}


def test_a_silent_worker_costs_one_deadline(pipes) -> None:
    connection, _, _ = pipes
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError):
        connection.receive(started + 0.2)
    assert 0.2 <= time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    "output",
    [b"not json\n", b"[1, 2]\n", b'{"no_type": 1}\n', b"x" * 5000, b'{"type": "pong"'],
    ids=["garbage", "not-an-object", "no-type", "endless-line", "cut-off"],
)
def test_hostile_or_dead_worker_output_is_a_crash(pipes, output: bytes) -> None:
    connection, worker_out, _ = pipes
    os.write(worker_out, output)
    os.close(worker_out)
    with pytest.raises(WorkerCrashedError):
        connection.receive(time.monotonic() + 1)


def test_sending_to_a_gone_worker_is_a_crash(pipes) -> None:
    connection, _, worker_in = pipes
    os.close(worker_in)
    with pytest.raises(WorkerCrashedError):
        connection.send({"op": "ping"}, time.monotonic() + 1)


def test_a_worker_that_stops_reading_costs_one_deadline(pipes) -> None:
    connection, _, _ = pipes  # nobody reads the worker's input: a pipe holds 64 KiB
    started = time.monotonic()
    with pytest.raises(WorkerTimeoutError):
        connection.send({"op": "call", "arguments": {"text": "x" * (1 << 20)}}, started + 0.2)
    assert 0.2 <= time.monotonic() - started < 1.0


def test_a_reply_must_carry_the_request_id(pipes) -> None:
    connection, worker_out, worker_in = pipes
    request_id = connection.request({"op": "ping"}, time.monotonic() + 1)
    assert f'"id": "{request_id}"'.encode() in os.read(worker_in, 4096)
    os.write(worker_out, b'{"type": "pong", "id": "guessed"}\n{"type": "pong"}\n')
    for _ in range(2):
        with pytest.raises(WorkerProtocolError, match="forged or stale"):
            connection.receive(time.monotonic() + 1, request_id)
    os.write(worker_out, f'{{"type": "pong", "id": "{request_id}"}}\n'.encode())
    assert connection.receive(time.monotonic() + 1, request_id)["type"] == "pong"


def test_lone_surrogates_become_replacement_characters(pipes) -> None:
    connection, worker_out, _ = pipes
    os.write(worker_out, b'{"type": "result", "value": ["a\\ud800", {"\\udfff": "\\ud83d\\ude00"}]}\n')
    message = connection.receive(time.monotonic() + 1)
    assert message["value"] == ["a\ufffd", {"\ufffd": "\U0001f600"}]
    message["value"][0].encode("utf-8")  # encodable, unlike a lone surrogate


def test_surrogates_written_as_raw_bytes_become_replacement_characters(pipes) -> None:
    connection, worker_out, _ = pipes
    os.write(worker_out, b'{"type": "result", "value": "a\xed\xa0\x80b"}\n')  # U+D800 as UTF-8 bytes
    value = connection.receive(time.monotonic() + 1)["value"]
    assert value.startswith("a\ufffd") and value.endswith("\ufffdb")
    value.encode("utf-8")
