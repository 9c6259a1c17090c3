"""The host's two ends of a container's attached stdin/stdout: the attach stream split into the worker's
output (read by a ``WorkerConnection``) and its stderr, and a non-blocking writer of its input."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

_STDERR_CAP = 8192


class AttachRelay:
    """Splits the attach stream's frames: stdout goes to a pipe that a WorkerConnection reads,
    stderr into a small buffer kept for error messages. Ends (closing the pipe) when the stream ends."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._frames = sock.makefile("rb")
        read_fd, self._write_fd = os.pipe()
        self.reader = os.fdopen(read_fd, "rb", buffering=0)
        self.stderr = bytearray()
        self.ended = threading.Event()
        threading.Thread(target=self._run, name="hopgym-docker-attach", daemon=True).start()

    def _run(self) -> None:
        try:
            while len(header := self._frames.read(8)) == 8:
                stream, size = header[0], int.from_bytes(header[4:8], "big")
                payload = self._frames.read(size)
                if stream == 1:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(self._write_fd, view) :]
                else:
                    self.stderr += payload[: max(0, _STDERR_CAP - len(self.stderr))]
                if len(payload) < size:
                    break
        except (OSError, ValueError):
            pass  # the host closed the pipe or the socket: the worker is being dropped
        finally:
            os.close(self._write_fd)
            self.ended.set()

    def close(self) -> None:
        """Wake and end the relay thread, and close the connection to the engine."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._frames.close()
        self._sock.close()

    def stderr_text(self) -> str:
        text = self.stderr.decode(errors="replace").strip()
        return f"\nworker stderr:\n{text[-2000:]}" if text else ""


class SocketWriter:
    """The write side of the attach socket, written without blocking (the socket itself stays blocking
    for the relay thread that reads it); closing it closes the worker's stdin (end of input)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def write_some(self, data: bytes | memoryview) -> int:
        try:
            return self._sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
