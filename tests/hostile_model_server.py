"""An HTTP server on 127.0.0.1 that answers chat requests the way a broken or hostile model server might:
bytes trickled forever, a body without end, 50 MiB, a gzip bomb, JSON cut off, HTML. Written on raw
sockets so that nothing in it tidies the reply up; each behaviour takes the request's JSON body and the
socket, and writes whatever it likes."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from typing import Any

from hopgym.agents.model.scripted_server import ModelServerThread

Behaviour = Callable[[dict[str, Any], socket.socket], None]

MIB = 2**20


def completion(content: str) -> bytes:
    """A well-formed chat completion whose reply is ``content``."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    return json.dumps(body | {"usage": usage}).encode()


def head(status: str = "200 OK", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(content: str) -> Behaviour:
    def send(_request: dict[str, Any], sock: socket.socket) -> None:
        body = completion(content)
        sock.sendall(head(Content_Length=str(len(body))) + body)

    return send


def trickle(_request: dict[str, Any], sock: socket.socket) -> None:
    """A valid start and then one byte a second, for as long as the client listens."""
    body = completion("x" * 1000)
    sock.sendall(head(Content_Length=str(len(body))))
    for byte in body:
        sock.sendall(bytes([byte]))
        time.sleep(1.0)


def endless(_request: dict[str, Any], sock: socket.socket) -> None:
    """A chunked body that never ends, as fast as the client takes it."""
    sock.sendall(head(Transfer_Encoding="chunked"))
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"a" * 64 * 1024)
    while True:
        sock.sendall(chunk)


@functools.cache
def _huge_completion() -> bytes:
    return completion("x" * 50 * MIB)


@functools.cache
def _gzipped_completion() -> bytes:
    return gzip.compress(completion(" " * 50 * MIB), compresslevel=9)


def huge(declared: bool) -> Behaviour:
    """A valid completion of 50 MiB of content, its length declared or not (chunked)."""

    def send(_request: dict[str, Any], sock: socket.socket) -> None:
        body = _huge_completion()
        if declared:
            sock.sendall(head(Content_Length=str(len(body))) + body)
            return
        sock.sendall(head(Transfer_Encoding="chunked"))
        for start in range(0, len(body), MIB):
            piece = body[start : start + MIB]
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sock.sendall(b"0\r\n\r\n")

    return send


def gzip_bomb() -> Behaviour:
    """50 MiB of completion compressed to about 50 KiB (once, here: it takes a while), sent as gzip though
    the client asked for none."""
    body = _gzipped_completion()

    def send(_request: dict[str, Any], sock: socket.socket) -> None:
        sock.sendall(head(Content_Length=str(len(body)), Content_Encoding="gzip") + body)

    return send


def cut_mid_json(_request: dict[str, Any], sock: socket.socket) -> None:
    """Declares a whole completion, sends half of it, and hangs up."""
    body = completion("an answer")
    sock.sendall(head(Content_Length=str(len(body))) + body[: len(body) // 2])


def truncated_json(_request: dict[str, Any], sock: socket.socket) -> None:
    """A complete HTTP reply whose body is a completion cut in the middle of a string."""
    body = completion("an answer")[:-40]
    sock.sendall(head(Content_Length=str(len(body))) + body)


def not_json(_request: dict[str, Any], sock: socket.socket) -> None:
    """A proxy's error page of 32 KiB (under the tests' cap) with status 200."""
    body = b"<html><body>502 bad gateway" + b" <br>" * 6500 + b"</body></html>"
    sock.sendall(head(Content_Length=str(len(body))) + body)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        stream = self.request.makefile("rb")
        length = 0
        while (line := stream.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        request = json.loads(stream.read(length) or b"{}")
        with self.server.lock:
            self.server.requests.append(request)
        with contextlib.suppress(OSError):  # the client hung up: what it should do
            self.server.behaviour(request, self.request)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = behaviour
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()


class HostileModelServer(ModelServerThread):
    """Context manager: serves ``behaviour`` to every request on a free port of 127.0.0.1."""

    model = "openai/hostile"

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(_Server(behaviour))
