"""The host side of the JSON-lines protocol spoken with a sandbox worker (see ``worker.py``).

One JSON object per line in each direction. The host sends requests; the worker answers each with
exactly one final message, possibly preceded by events:

- worker -> host at start: ``{"type": "ready", "version", "pid", "uid", "seccomp", "rlimits", "namespaces"}``
  (or ``{"type": "fatal", "error"}`` when hardening failed; the worker then exits).
- ``{"op": "ping"}`` -> ``{"type": "pong"}``
- ``{"op": "load", "sources": [str, ...]}`` -> ``{"type": "loaded", "functions": [...], "errors": [...]}``
- ``{"op": "preload", "sources": [str, ...]}`` -> ``{"type": "preloaded", "errors": [...]}``: optional, once,
  before ``load``, sent by the pool before a worker is handed out; ``load`` then runs in that namespace.
- ``{"op": "call", "name", "arguments"}`` -> a result message
- ``{"op": "execute", "code"}`` -> zero or more ``{"type": "tool_call", "name", "arguments"}`` events, each
  answered by the host with ``{"op": "tool_reply", "error": null | str}`` and later followed by a
  ``{"type": "tool_done", "status", "value", "error"}`` event; then a result message.
- result message: ``{"type": "result", "status", "value", "error", "stdout", "truncated"}``.

Everything the worker writes is untrusted: lines are size-capped and shape-checked here, and every read has
a wall-clock deadline, so a hostile or hung worker costs at most one deadline and one replacement.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from typing import Any, BinaryIO

from hopgym.errors import WorkerCrashedError, WorkerTimeoutError

PROTOCOL_VERSION = 1
"""Bumped whenever a message changes shape; the worker reports its own in the ready message."""

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
"""Longest line accepted from a worker; results are capped far below this inside the worker."""

_READ_CHUNK = 1 << 16


class WorkerConnection:
    """Requests and replies over any pair of byte streams with file descriptors (pipes, sockets)."""

    def __init__(
        self, reader: BinaryIO, writer: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    ) -> None:
        self._reader_fd = reader.fileno()
        self._writer = writer
        self._max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._streams = (reader, writer)

    def send(self, message: dict[str, Any]) -> None:
        """Write one request; a closed pipe means the worker is gone."""
        data = json.dumps(message).encode("ascii") + b"\n"
        try:
            self._writer.write(data)
            self._writer.flush()
        except (BrokenPipeError, ConnectionError, ValueError, OSError) as exc:
            raise WorkerCrashedError(f"worker input is closed ({exc})") from exc

    def receive(self, deadline: float) -> dict[str, Any]:
        """Read one message, waiting at most until ``deadline`` (a ``time.monotonic()`` value)."""
        line = self._read_line(deadline)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise WorkerCrashedError(f"worker wrote a line that is not JSON: {line[:200]!r}") from exc
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise WorkerCrashedError(f"worker wrote a message without a type: {line[:200]!r}")
        return message

    def close(self) -> None:
        """Close both streams (the worker sees end of input)."""
        for stream in self._streams:
            with contextlib.suppress(OSError):
                stream.close()

    def _read_line(self, deadline: float) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > self._max_line_bytes:
                raise WorkerCrashedError(f"worker wrote a line longer than {self._max_line_bytes} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeoutError("worker did not answer before the deadline")
            readable, _, _ = select.select([self._reader_fd], [], [], remaining)
            if not readable:
                raise WorkerTimeoutError("worker did not answer before the deadline")
            chunk = os.read(self._reader_fd, _READ_CHUNK)
            if not chunk:
                raise WorkerCrashedError("worker exited (end of output)")
            self._buffer += chunk
