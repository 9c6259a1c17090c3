"""The worker's side of the wire: the protocol stream, the capped output and the encoding of results and
errors into messages; the host's side is ``protocol.py``, and the message shapes here must match it.

One of the worker's modules (``isolation.WORKER_FILES``): it runs inside the sandbox, so it imports only the
standard library and the worker's own modules; the host imports its protocol version, error cap and
:func:`ready` from here (one definition each).
"""

from __future__ import annotations

import errno
import io
import json
import os

PROTOCOL_VERSION = 2
"""Bumped whenever a message changes shape; the worker reports its own in the ready message."""
ERROR_TEXT_CAP = 2000
"""Characters of an error text the worker sends (:func:`describe_error`)."""
dumps, loads = json.dumps, json.loads
"""The worker's own references: tool code may patch the json module."""


def ready(fd: int, timeout: float | None, writing: bool = False) -> bool:
    """Whether ``fd`` is readable (or writable), waiting at most ``timeout`` seconds (None: no limit); an
    end of file, a hang-up or an error counts as ready, as in ``select``. Through ``poll``, not ``select``:
    a host with many sessions holds descriptors numbered past ``select``'s limit of 1024. The host's side
    of the protocol waits with it too (``protocol.ready``)."""
    import select  # not at start-up: most workers never wait on a descriptor

    waiting = select.poll()
    waiting.register(fd, select.POLLOUT if writing else select.POLLIN)
    events = waiting.poll(None if timeout is None else max(timeout, 0.0) * 1000)
    if events and events[0][1] & select.POLLNVAL:
        raise OSError(errno.EBADF, f"descriptor {fd} is not open")
    return bool(events)


# ------------------------------------------------------------------------------------------------ channel


class Channel:
    """The protocol stream, moved off fds 0-2 so that tools writing to fd 1 cannot corrupt it."""

    def __init__(self) -> None:
        self.request_id: str | None = None
        """The id of the request being served; every message sent carries it (see ``protocol.py``)."""
        self._reader = os.fdopen(os.dup(0), "rb")
        self._out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    def send(self, message: dict, value_json: str | None = None) -> None:
        """Write one message; ``value_json`` is spliced in as the already-serialised ``value`` field."""
        text = dumps(message if self.request_id is None else {**message, "id": self.request_id})
        if value_json is not None:
            text = text[:-1] + (', "value": ' if message else '"value": ') + value_json + "}"
        data = (text + "\n").encode("ascii")
        while data:
            data = data[os.write(self._out, data) :]

    def receive(self) -> dict | None:
        line = self._reader.readline()
        return loads(line.decode()) if line else None  # str: json.loads would detect the encoding


class DiscardingChannel(Channel):
    """Stands in for the host during the fork template's warm-up: builds each message, sends nothing."""

    def __init__(self) -> None:  # no streams: nothing is read or written
        self.request_id = None

    def send(self, message: dict, value_json: str | None = None) -> None:
        dumps(message)


# ------------------------------------------------------------------------------------------------ results


class CappedOutput(io.TextIOBase):
    """A text stream that keeps the first ``cap`` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._cap = cap
        self.overflow = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self._cap - self._size
        if room > 0:
            kept = text[:room]
            self._parts.append(kept)
            self._size += len(kept)
        self.overflow += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self) -> str:
        marker = f"\n...[output truncated: {self.overflow} more characters]" if self.overflow else ""
        return "".join(self._parts) + marker


def encode_value(value: object, cap: int) -> tuple[str, bool]:
    """JSON text of ``value`` (non-JSON parts as their repr); past ``cap`` characters, a string holding the
    first ``cap`` characters and a marker, and True."""
    try:
        text = _encode_with_repr(value)
    except BaseException:  # whatever a hostile value raises, the reply is still sent
        text = dumps(_safe_repr(value))
    if len(text) <= cap:
        return text, False
    # A long string is cut as text (a str subclass's own methods are not trusted), anything else as JSON.
    shown = str.__str__(value) if isinstance(value, str) else text
    return dumps(f"{shown[:cap]}...[truncated: {len(shown)} characters in all]"), True


def _safe_repr(value: object) -> str:
    try:
        text = repr(value)
        if type(text) is str:
            return text
        raise TypeError(f"__repr__ returned {type(text).__name__}")
    except BaseException as exc:  # a hostile __repr__ must not break the worker
        return f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"


_encode_with_repr = json.JSONEncoder(default=_safe_repr).encode
"""``json.dumps(value, default=_safe_repr)`` without building a new encoder for every result."""


def describe_error(exc: BaseException, limit: int = ERROR_TEXT_CAP) -> str:
    return f"{type(exc).__name__}: {_safe_repr_message(exc)}"[:limit]


def _safe_repr_message(exc: BaseException) -> str:
    try:
        text = str(exc)
        return text if type(text) is str else "<message not printable>"
    except BaseException:  # a hostile __str__ must not break the worker
        return "<message not printable>"


def status_of(exc: BaseException) -> str:
    return "resource_limit" if isinstance(exc, MemoryError) else "error"
