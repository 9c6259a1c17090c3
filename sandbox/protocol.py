"""The host side of the JSON-lines protocol spoken with a sandbox worker (its side: ``wire.py``).

One JSON object per line in each direction. The host sends requests, each with a fresh random ``id``; the
worker answers each with exactly one final message, possibly preceded by events, and every message it sends
for a request carries that request's ``id``:

- worker -> host at start: ``{"type": "ready", "version", "pid", "uid", "seccomp", "rlimits", "namespaces",
  "bytecode"}`` (or ``{"type": "fatal", "error"}`` when hardening failed; the worker then exits). No ``id``.
  ``bytecode``: the worker's magic number (hex) when it runs host-compiled code, else null.
- ``{"op": "ping"}`` -> ``{"type": "pong"}``
- ``{"op": "load", "sources": [str | {"code": base64}, ...]}`` -> ``{"type": "loaded", "functions": [...],
  "errors": [...], "parameters": {function: [positional parameter names]}}``; ``code`` (the magic number,
  then marshal data, made by the host's ``compile``) only to a worker whose ``bytecode`` it starts with.
- ``{"op": "call", "name", "arguments"}`` -> a result message
- ``{"op": "execute", "code", "tools": [name, ...]}``, sent to a second worker of the episode that holds
  no tool code -> zero or more ``{"type": "tool_call", "name", "call": {"args", "kwargs"}}`` events, each
  answered by the host (which runs the call itself in the episode's worker) with ``{"op": "tool_reply",
  "status", "value", "error", "stdout"}`` (status ``refused`` when validation refused it); then a result.
- result message: ``{"type": "result", "status", "value", "error", "stdout", "truncated"}``.

Everything the worker writes is untrusted: every read and every write has a wall-clock deadline, a line is
refused past a size cap before it is parsed, a message must carry the id of the request it answers (a line
written by a tool's background thread, or left over from an earlier call, cannot pass for a reply), and lone
surrogates in its strings become U+FFFD. So a hostile or hung worker costs at most one deadline and one
replacement, and never shifts one call's result onto another.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from typing import IO, Any, Protocol

from hopgym.errors import WorkerCrashedError, WorkerProtocolError, WorkerTimeoutError
from hopgym.sandbox.wire import ERROR_TEXT_CAP
from hopgym.sandbox.wire import ready as ready  # one copy for both sides: the worker imports no host module

_ESCAPED_CHAR_BYTES = 12
"""The most bytes one character takes in the worker's ASCII-only JSON (an astral character: two escapes)."""
_FRAMING_BYTES = 64 * 1024
"""Room for a message's keys, status and the episode's function names and load errors."""

_READ_CHUNK = 1 << 16
_ID_BYTES = 8
_IDS_PER_READ = 64
"""Request ids are read from the kernel's random source this many at a time (one syscall, not one each)."""
_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def reply_cap(result_cap: int, output_cap: int) -> int:
    """The longest line a worker with these caps can legitimately write: a value of ``result_cap``
    characters, ``output_cap`` characters of output and an error text, each fully escaped, plus framing.
    Anything longer is refused before it is parsed, so a reply cannot grow into a large heap on the host."""
    return _ESCAPED_CHAR_BYTES * (result_cap + output_cap + ERROR_TEXT_CAP) + _FRAMING_BYTES


class Writer(Protocol):
    """The host's end of the worker's input, written without ever blocking."""

    def fileno(self) -> int: ...

    def write_some(self, data: bytes | memoryview) -> int:
        """Write what fits now; 0 when the worker's input is full."""

    def close(self) -> None: ...


class PipeWriter:
    """A pipe's write end switched to non-blocking (only the host's end: the worker still blocks)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._fd = stream.fileno()
        os.set_blocking(self._fd, False)

    def fileno(self) -> int:
        return self._fd

    def write_some(self, data: bytes | memoryview) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.close()


class WorkerConnection:
    """Requests and replies over a byte stream with a file descriptor (a pipe) and a :class:`Writer`."""

    def __init__(self, reader: IO[bytes], writer: Writer, max_line_bytes: int) -> None:
        self._reader = reader
        self._reader_fd = reader.fileno()
        self._writer = writer
        self._max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._random = b""
        self.bytes_received = 0
        """Every byte read from the worker so far (callers budget a stream of events with it)."""

    def request(self, message: dict[str, Any], deadline: float) -> str:
        """Send ``message`` as a new request; returns the id every message answering it must carry."""
        request_id = self._new_request_id()
        self.send({**message, "id": request_id}, deadline)
        return request_id

    def send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one message, waiting at most until ``deadline`` for the worker to read its input."""
        try:
            data = json.dumps(message).encode("ascii") + b"\n"
        except (TypeError, ValueError, RecursionError) as exc:  # raised before anything was written
            raise WorkerProtocolError(f"the request cannot be sent as JSON ({exc})") from exc
        written = self._write_some(data)
        if written < len(data):  # the worker's input is full: it must run to read the rest
            self._input_ready()
            rest = memoryview(data)[written:]
            while rest:
                self._wait(self._writer.fileno(), deadline, writing=True)
                rest = rest[self._write_some(rest) :]
        self._input_ready()

    def _input_ready(self) -> None:
        """Called once the worker has input to read (and before waiting for it to read more); a subclass
        that holds the worker between requests lets it go on here (see ``launcher.PausingConnection``)."""

    def _write_some(self, data: bytes | memoryview) -> int:
        try:
            return self._writer.write_some(data)
        except (BrokenPipeError, ConnectionError, ValueError, OSError) as exc:
            raise WorkerCrashedError(f"worker input is closed ({exc})") from exc

    def _new_request_id(self) -> str:
        """An id the worker cannot guess before the request is sent: 8 bytes of the kernel's random source,
        which is read for :data:`_IDS_PER_READ` ids at a time (a syscall per call showed in the warm call)."""
        if not self._random:
            self._random = os.urandom(_ID_BYTES * _IDS_PER_READ)
        request_id, self._random = self._random[:_ID_BYTES], self._random[_ID_BYTES:]
        return request_id.hex()

    def receive(self, deadline: float, request_id: str | None = None) -> dict[str, Any]:
        """Read one message, waiting at most until ``deadline`` (a ``time.monotonic()`` value); with a
        ``request_id``, a message that does not carry it breaks the protocol."""
        line = self._read_line(deadline)
        # The worker writes ASCII; any other byte is replaced, so that a surrogate encoded as raw bytes
        # (which json.loads would decode with "surrogatepass") cannot slip past the check below.
        text = line.decode("utf-8", "replace")
        try:
            message = json.loads(text)
            if _LONE_SURROGATE_ESCAPE.search(text):
                message = _without_lone_surrogates(message)
        except (ValueError, RecursionError) as exc:
            raise WorkerProtocolError(f"worker wrote a line that is not JSON: {line[:200]!r}") from exc
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise WorkerProtocolError(f"worker wrote a message without a type: {line[:200]!r}")
        if request_id is not None and message.get("id") != request_id:
            raise WorkerProtocolError(
                f"worker wrote a {message['type']!r} message that does not answer the pending request "
                "(a forged or stale reply)"
            )
        return message

    def close(self) -> None:
        """Close both streams (the worker sees end of input)."""
        self._writer.close()
        with contextlib.suppress(OSError):
            self._reader.close()

    def _read_line(self, deadline: float) -> bytes:
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            searched = len(self._buffer)
            if len(self._buffer) > self._max_line_bytes:
                raise WorkerProtocolError(f"worker wrote a line longer than {self._max_line_bytes} bytes")
            self._wait(self._reader_fd, deadline, writing=False)
            chunk = os.read(self._reader_fd, _READ_CHUNK)
            if not chunk:
                raise WorkerCrashedError("worker exited (end of output)")
            self.bytes_received += len(chunk)
            self._buffer += chunk

    @staticmethod
    def _wait(fd: int, deadline: float, writing: bool) -> None:
        remaining = deadline - time.monotonic()
        if not (remaining > 0 and ready(fd, remaining, writing)):
            what = "read its input" if writing else "answer"
            raise WorkerTimeoutError(f"worker did not {what} before the deadline")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every unpaired surrogate in its strings (keys too) replaced by U+FFFD: such strings
    cannot be encoded as UTF-8, so they would break whatever writes the result later (a log, a model call)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(key): _without_lone_surrogates(item) for key, item in value.items()}
    return value
