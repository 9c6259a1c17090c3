"""The ASGI middlewares around ``hopgym serve env``'s OpenEnv app: a quiet close of WebSocket sessions the
client ended, an idle timeout per session that frees its env and place, and an API key gate.

Each wraps any ASGI app and knows nothing of envs: the adapter
(:mod:`~hopgym.serving.openenv_server`) is about serving an env, these are about connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.websockets import WebSocketDisconnect

API_KEY_HEADER = "authorization"
"""Clients send ``Authorization: Bearer KEY`` (HTTP requests and the WebSocket handshake)."""
IDLE_CLOSE_CODE = 4408
"""The WebSocket close code of a session closed for idleness (4000-4999 are private; 408: HTTP's timeout)."""

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class QuietClose:
    """ASGI middleware: openenv closes every ended WebSocket session, and when the client closed first that
    close raises ``WebSocketDisconnect`` (openenv catches only ``RuntimeError``), which uvicorn would log as a
    crash of the app at each normal session end. The session is destroyed (its env closed) before."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self._app(scope, receive, send)
            return
        with contextlib.suppress(WebSocketDisconnect):
            await self._app(scope, receive, send)


class IdleClose:
    """ASGI middleware: a WebSocket session whose client sends nothing for ``timeout`` seconds (counted
    while the server waits for it, not while a step runs) is closed with :data:`IDLE_CLOSE_CODE` and a
    reason, and openenv is told that the client left, so it closes the session's env and frees its place.

    Not openenv's own reaper (``ConcurrencyConfig(session_timeout=...)``): that one closes the env and
    frees the place but leaves the socket open, whose next frame then reaches a closed env, and it looks
    only every max(timeout / 4, 5 s)."""

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self._app = app
        self._timeout = timeout

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self._app(scope, receive, send)
            return
        session = _IdleSession(receive, send, self._timeout)
        watch = asyncio.create_task(session.watch())
        try:
            await self._app(scope, session.receive, session.send)
        finally:
            watch.cancel()


class _IdleSession:
    """One WebSocket's idle clock. A timer per receive would cost more than the rest of the server's
    step; instead ``receive`` notes when it starts waiting, and one task per session wakes when that wait
    would exceed the timeout and then cancels it."""

    def __init__(self, receive: Any, send: Any, timeout: float) -> None:
        self._receive, self._send, self._timeout = receive, send, timeout
        self._loop = asyncio.get_running_loop()
        self._waiting_since: float | None = None
        self._waiter: asyncio.Task[Any] | None = None
        self._expired = False

    async def receive(self) -> Any:
        if self._expired:
            return {"type": "websocket.disconnect", "code": IDLE_CLOSE_CODE}
        self._waiter, self._waiting_since = asyncio.current_task(), self._loop.time()
        try:
            return await self._receive()
        except asyncio.CancelledError:
            if not self._expired:
                raise
            if self._waiter is not None and hasattr(self._waiter, "uncancel"):  # Python 3.11+
                self._waiter.uncancel()
        finally:
            self._waiting_since = None
        reason = f"session idle for {self._timeout:g} s (the server's --session-timeout): start a new one"
        await self._send({"type": "websocket.close", "code": IDLE_CLOSE_CODE, "reason": reason})
        return {"type": "websocket.disconnect", "code": IDLE_CLOSE_CODE}

    async def send(self, message: Any) -> None:
        if not self._expired:  # once closed here, openenv's own close has nothing left to close
            await self._send(message)

    async def watch(self) -> None:
        while True:
            since = self._waiting_since
            left = self._timeout if since is None else since + self._timeout - self._loop.time()
            if since is not None and left <= 0 and self._waiter is not None:
                self._expired = True
                self._waiter.cancel()
                return
            await asyncio.sleep(left)


class ApiKeyGate:
    """ASGI middleware: every HTTP request and WebSocket handshake but ``/health`` must carry
    ``Authorization: Bearer KEY``; others get 401 (HTTP) or a refused handshake (403)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self._app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/health":
            given = dict(scope.get("headers") or ()).get(API_KEY_HEADER.encode(), b"")
            if not hmac.compare_digest(given, self._expected):
                await _refuse(scope, send)
                return
        await self._app(scope, receive, send)


async def _refuse(scope: Scope, send: Any) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong API key"})
        return
    body = b'{"detail": "missing or wrong API key (Authorization: Bearer KEY)"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
