"""A scripted OpenAI-compatible chat server on 127.0.0.1, for deterministic tests and benchmarks.

It is a real HTTP server (so the whole client stack, litellm included, is exercised) whose replies come
from a script: a function from the request body to a :class:`ScriptedReply`. Replies can be tool calls,
text, HTTP errors or slow answers, which is what retry, timeout and runner tests need.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from hopgym.errors import ConfigError
from hopgym.messages import tool_call as openai_tool_call

if TYPE_CHECKING:
    from typing import Self  # Python 3.11+: only read by the type checker here (hopgym supports 3.10)


@dataclass(frozen=True)
class ScriptedReply:
    """One answer of the scripted server: an assistant message, or an HTTP error, after ``delay`` s."""

    content: str = ""
    tool_calls: tuple[tuple[str, Any], ...] = ()
    """``(name, arguments)`` pairs; arguments that are not a string are JSON-encoded."""
    status: int = 200
    delay: float = 0.0
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str | None = None
    """Sent as given (e.g. ``"length"``: cut at the token cap); None: ``tool_calls`` or ``stop``."""
    message_fields: tuple[tuple[str, Any], ...] = ()
    """Further fields of the message as some servers send them, e.g. ``("reasoning_content", "...")``."""
    raw_body: str | None = None
    """Sent as the whole body with status 200 instead of a completion: a broken server or proxy."""


Script = Callable[[dict[str, Any]], ScriptedReply]


def sequence_script(replies: Iterable[ScriptedReply]) -> Script:
    """A script that answers each request with the next reply; it fails loudly when they run out."""
    iterator = iter(replies)
    lock = threading.Lock()

    def next_reply(_request: dict[str, Any]) -> ScriptedReply:
        with lock:
            reply = next(iterator, None)
        if reply is None:
            raise ConfigError("the scripted server received more requests than its script has replies")
        return reply

    return next_reply


def tool_call(name: str, arguments: Any) -> tuple[str, Any]:
    """Readable shorthand for one entry of :attr:`ScriptedReply.tool_calls`."""
    return (name, arguments)


_PLACEHOLDERS = {"string": "x", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


def placeholder_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """A value for each required parameter of a JSON schema: its first enum value, else one of its type."""
    properties = parameters.get("properties") or {}
    arguments = {}
    for name in parameters.get("required") or ():
        schema = properties.get(name) or {}
        kind = schema.get("type", "string")
        kind = kind[0] if isinstance(kind, list) and kind else kind
        arguments[name] = (schema.get("enum") or [_PLACEHOLDERS.get(kind, "x")])[0]
    return arguments


def smoke_script(request: dict[str, Any]) -> ScriptedReply:
    """The policy of ``hopgym serve scripted``, for smoke tests of any env and agent without a model: while
    no tool result is in the conversation, call the first offered tool with placeholder arguments; then
    (or when no tool is offered) answer with the last tool result. Deterministic, so a run is repeatable."""
    messages = request.get("messages") or []
    results = [m.get("content") for m in messages if m.get("role") == "tool"]
    tools = request.get("tools") or []
    if tools and not results:
        function = tools[0]["function"]
        arguments = placeholder_arguments(function.get("parameters") or {})
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),))
    return ScriptedReply(content=f"Final answer: {results[-1] if results else 'unknown'}")


class _Handler(BaseHTTPRequestHandler):
    server: _ScriptedHTTPServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms ACK delay

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with self.server.lock:
            self.server.requests.append(body)
        try:
            reply = self.server.script(body)
        except ConfigError as exc:
            self._send(500, {"error": {"message": str(exc), "type": "script_exhausted"}})
            return
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            self._send(reply.status, {"error": {"message": f"scripted {reply.status}", "type": "server"}})
            return
        if reply.raw_body is not None:
            self._send(200, reply.raw_body.encode())
            return
        self._send(200, self.server.completion(body, reply))

    def _send(self, status: int, payload: dict[str, Any] | bytes) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout); fine
            pass


class _ScriptedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's backlog of 5 drops the connections of a concurrent burst; each dropped SYN costs the
    # client a 1 s retransmit. Model servers (uvicorn, llama-cpp's) listen with a backlog of 2048.
    request_queue_size = 2048

    def __init__(self, script: Script, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._ids = itertools.count()

    def completion(self, request: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        number = next(self._ids)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content,
            **dict(reply.message_fields),
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                openai_tool_call(name, arguments, f"call_{number}_{index}")
                for index, (name, arguments) in enumerate(reply.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
        }


class RecordingServer(Protocol):
    """A socketserver that keeps every chat request body it receives (``requests``, under ``lock``)."""

    requests: list[dict[str, Any]]
    lock: threading.Lock
    server_address: Any

    def serve_forever(self) -> None: ...
    def shutdown(self) -> None: ...
    def server_close(self) -> None: ...


class ModelServerThread:
    """Context manager: runs a :class:`RecordingServer` on 127.0.0.1 in a background thread for the length
    of a ``with`` block. The scripted server below and the tests' hostile one are both this, with their own
    socketserver."""

    model: str
    """The litellm model name a client asks this server for."""

    def __init__(self, server: RecordingServer) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request body received so far, in arrival order."""
        with self._server.lock:
            return list(self._server.requests)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class ScriptedModelServer(ModelServerThread):
    """Context manager: serves ``script`` on 127.0.0.1 (``port``, by default a free one) in a background
    thread."""

    model = "openai/scripted"

    def __init__(self, script: Script, port: int = 0) -> None:
        super().__init__(_ScriptedHTTPServer(script, port))
