"""The run viewer of ``hopgym view``: a local web page over run folders, served on 127.0.0.1 only.

A standard-library HTTP server answers three kinds of path: the page itself (a fixed set of files shipped
in ``viewer_static``), a JSON API (the runs with one outline per episode, and one episode's whole record),
and the regular files inside the run folders it was given (opened without following any link and checked
once open, so swapping a file for a link while it is served serves nothing outside). Episode content is
model and tool output, so the page puts it in the DOM as text only and every response carries a
Content-Security-Policy that runs no inline script. A ``Host`` other than the server's own address is
refused, so a web page elsewhere cannot read runs through DNS rebinding, and so is any request for run data
without the random token of the printed URL (as Jupyter does), so another local user cannot read them.
A query or path value that names nothing a run could hold (a non-ASCII digit, a 5,000-digit index, a NUL)
is answered 400 naming the parameter.
Each connection must send its next request within :data:`CONNECTION_TIMEOUT` seconds (else it is closed)
and at most :data:`MAX_CONNECTIONS` are served at once: idle or slow clients cannot pin threads.

What it serves of a run comes from :class:`~hopgym.agents.report.run_source.RunSource` (the run reading).
"""

from __future__ import annotations

import hmac
import io
import os
import secrets
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from hopgym.agents.report.markdown import run_names
from hopgym.agents.report.run_source import (
    OUTLINE_TEXT_LIMIT,
    RunSource,
    episode_outline,
    error_types,
    outcome,
)
from hopgym.errors import ConfigError, HopgymError, RequestError, one_line
from hopgym.run_folder import json_bytes

__all__ = [
    "OUTLINE_TEXT_LIMIT",
    "RunSource",
    "ViewerServer",
    "episode_outline",
    "error_types",
    "index_parameter",
    "open_viewer",
    "outcome",
    "text_parameter",
]

HOST = "127.0.0.1"
STATIC_FILES = {"/": "index.html", "/viewer.js": "viewer.js", "/viewer.css": "viewer.css"}
PUBLIC_PATHS = ("/viewer.js", "/viewer.css")
"""The page's code and style: no run data, so served without the token (the page itself needs it)."""
CONNECTION_TIMEOUT = 20.0
"""Seconds a connection has to send its next request (headers complete) or to take a response."""
MAX_CONNECTIONS = 32
"""Connections served at once (a thread each); one more is closed at once."""
_SEND_CHUNK = 2**20
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
}
# The page: its own script and style only (no inline script, so injected markup cannot run any).
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# A run folder's file opened directly: shown as data, never as an active document.
FILE_POLICY = "default-src 'none'; sandbox"
INDEX_DIGITS = 9
"""The most digits of a run index or sample number in a request: more name nothing a run holds, and int()
refuses over 4,300 (its conversion limit) after quadratic work."""
TEXT_PARAMETER_CHARS = 4096
"""The longest task id or file path a request may carry."""


class ViewerServer(ThreadingHTTPServer):
    """The viewer's HTTP server over ``sources``, bound to 127.0.0.1 (``port`` 0: a free one)."""

    def __init__(
        self,
        sources: Sequence[RunSource],
        port: int = 0,
        connection_timeout: float = CONNECTION_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.sources = list(sources)
        self.token = secrets.token_urlsafe(32)
        self.connection_timeout = connection_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as exc:
            raise ConfigError(f"cannot serve on {HOST}:{port}: {exc.strerror or exc}") from exc
        self.allowed_hosts = {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """The page's address, token included: what ``hopgym view`` prints."""
        return f"http://{HOST}:{self.port}/?token={self.token}"

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection in a thread of its own while fewer than ``max_connections`` are served,
        else close it at once. A KeyboardInterrupt (SIGTERM, in ``hopgym view``) that lands while the thread
        starts goes on up and stops the server: the started thread still releases its slot, so releasing it
        here too would raise ValueError, which serve_forever logs and goes on serving."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:  # the thread did not start (it releases the slot itself once started)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _DeadlineSocketIO(socket.SocketIO):
    """A connection's reading side whose every read waits at most until the handler's deadline, so a
    client sending nothing, or a byte now and then, is dropped once it is over."""

    def __init__(self, sock: socket.socket, handler: _Handler) -> None:
        super().__init__(sock, "rb")
        self._handler = handler

    def readinto(self, buffer: Any) -> int | None:
        remaining = self._handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._handler.connection.settimeout(remaining)
        return super().readinto(buffer)


def open_viewer(
    folders: Sequence[Path],
    port: int = 0,
    connection_timeout: float = CONNECTION_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> ViewerServer:
    """A viewer server over these run folders (each read once now: a bad folder fails before serving)."""
    names = run_names(folders)
    sources = [RunSource(folder, name) for folder, name in zip(folders, names, strict=True)]
    return ViewerServer(sources, port, connection_timeout, max_connections)


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader: its reference would keep the socket open after close
        self.rfile = io.BufferedReader(_DeadlineSocketIO(self.connection, self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.server.connection_timeout
        super().handle_one_request()

    def log_message(self, *args: Any) -> None:  # the terminal shows the URL, not a line per request
        pass

    def do_GET(self) -> None:
        self.connection.settimeout(self.server.connection_timeout)  # for sending the response
        if self.headers.get("Host") not in self.server.allowed_hosts:
            self._send_json(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return
        if urlsplit(self.path).path not in PUBLIC_PATHS and not self._has_token():
            message = "missing or wrong token: open the URL that hopgym view printed"
            self._send_json(HTTPStatus.FORBIDDEN, {"error": message})
            return
        try:
            self._route()
        except RequestError as exc:
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": one_line(str(exc))})
        except HopgymError as exc:  # e.g. a run folder damaged since it was first read
            self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": one_line(str(exc))})

    def _has_token(self) -> bool:
        given = parse_qs(urlsplit(self.path).query).get("token", [""])[-1]
        return hmac.compare_digest(given.encode(), self.server.token.encode())

    def _route(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if path in STATIC_FILES:
            name = STATIC_FILES[path]
            body = (resources.files("hopgym.agents.report") / "viewer_static" / name).read_bytes()
            self._send(HTTPStatus.OK, body, _content_type(name), PAGE_POLICY)
        elif path == "/api/runs":
            self._send_json(HTTPStatus.OK, [source.overview() for source in self.server.sources])
        elif path == "/api/episode":
            self._episode(query)
        elif path.startswith("/runs/"):
            index, _, relative = path.removeprefix("/runs/").partition("/")
            self._run_file(index_parameter("run", index), text_parameter("file", relative))
        else:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such page"})

    def _source(self, index: int) -> RunSource | None:
        sources = self.server.sources
        return sources[index] if index < len(sources) else None

    def _episode(self, query: Mapping[str, str]) -> None:
        source = self._source(index_parameter("run", query.get("run", "")))
        sample = index_parameter("sample", query.get("sample", "0"))
        task = text_parameter("task", query.get("task", ""))
        record = source.episode(task, sample) if source else None
        if record is None:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such episode"})
        else:
            self._send_json(HTTPStatus.OK, {**record.to_json(), "outcome": outcome(record)})

    def _run_file(self, index: int, relative: str) -> None:
        source = self._source(index)
        fd = source.file(relative) if source and relative else None
        if fd is None:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": "no such file in the run folders served"})
            return
        with os.fdopen(fd, "rb") as handle:  # the file opened and checked is the one sent
            size = os.fstat(fd).st_size
            self._send_head(HTTPStatus.OK, size, _content_type(relative), FILE_POLICY)
            while size > 0:
                chunk = handle.read(min(size, _SEND_CHUNK))
                if not chunk:  # cut short while sent: the client sees fewer bytes than announced
                    self.close_connection = True
                    return
                self.wfile.write(chunk)
                size -= len(chunk)

    def _send_json(self, status: HTTPStatus, payload: Any) -> None:
        self._send(status, json_bytes(payload), _CONTENT_TYPES[".json"], FILE_POLICY)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, policy: str) -> None:
        self._send_head(status, len(body), content_type, policy)
        self.wfile.write(body)

    def _send_head(self, status: HTTPStatus, length: int, content_type: str, policy: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", policy)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()


def index_parameter(name: str, value: str) -> int:
    """The run index or sample number ``value`` of the request's ``name``: 1 to :data:`INDEX_DIGITS` ASCII
    digits, as ``str.isdigit`` alone would also pass a superscript or an Arabic-Indic digit that int()
    refuses (or reads), and a digit string of any length."""
    if not (value.isascii() and value.isdigit() and len(value) <= INDEX_DIGITS):
        raise RequestError(f"{name} must be a number of 1 to {INDEX_DIGITS} ASCII digits, not {value[:40]!r}")
    return int(value)


def text_parameter(name: str, value: str) -> str:
    """The task id or file path ``value`` of the request's ``name``: at most :data:`TEXT_PARAMETER_CHARS`
    characters and no NUL, which no task id holds and ``open`` refuses with ValueError."""
    if len(value) > TEXT_PARAMETER_CHARS or "\x00" in value:
        raise RequestError(
            f"{name} must be at most {TEXT_PARAMETER_CHARS} characters without NUL, not {value[:40]!r}"
        )
    return value


def _content_type(name: str) -> str:
    return _CONTENT_TYPES.get(Path(name).suffix, "text/plain; charset=utf-8")
