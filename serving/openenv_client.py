"""The trainer's side of ``hopgym serve env``: a typed OpenEnv ``EnvClient``.

::

    async with HopgymEnvClient("http://127.0.0.1:8000") as env:
        result = await env.reset(index=0)
        while not result.done:
            result = await env.step(HopgymAction.of(policy(result.observation)))
        result.reward, result.observation.info["correct"]

OpenEnv's own client reports a session the server refused (at capacity) as a plain closed connection, or
as a generic ``RuntimeError``; this one raises :class:`~hopgym.errors.EnvServerError` with the server's
message, and so for every error frame (a bad reset option or action: the session goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.protocol import State

from hopgym.errors import EnvServerError
from hopgym.serving.openenv_core import EnvClient, StepResult
from hopgym.serving.openenv_types import HopgymAction, HopgymObservation, HopgymState

_REFUSAL_WAIT = 1.0
"""How long to look for the server's last frame (its reason) once it closed the connection."""
_timeout = getattr(asyncio, "timeout", None)
"""``asyncio.timeout`` (Python 3.11+): a deadline on the current task, where ``wait_for`` before 3.12 makes
a new task for every message received."""


class HopgymEnvClient(EnvClient[HopgymAction, HopgymObservation, HopgymState]):
    """One session of a ``hopgym serve env`` server. ``api_key``: the server's, when it has one."""

    _ws: Any  # EnvClient's connection (openenv is untyped)

    def __init__(self, base_url: str, api_key: str | None = None, **options: Any) -> None:
        if api_key is not None:
            options["headers"] = {**options.get("headers", {}), "Authorization": f"Bearer {api_key}"}
        super().__init__(base_url, **options)
        self._messages: list[dict[str, Any]] = []
        """The session's chat so far, rebuilt from each observation's new messages."""
        self._tools: list[dict[str, Any]] | None = None
        """The tools the server sent last (a step whose tools are the same sends none)."""

    async def _connect_async(self) -> HopgymEnvClient:
        """Connect once: a session the server closed (idle, at capacity) is an :class:`EnvServerError` with
        its reason, not a new session opened behind the caller's back (openenv reconnects), whose episode
        would be gone; a refused handshake (a wrong API key) is one too."""
        if self._ws is not None and self._ws.state is State.CLOSED:
            protocol = self._ws.protocol
            closed = ConnectionClosed(protocol.close_rcvd, protocol.close_sent, protocol.close_rcvd_then_sent)
            raise EnvServerError(await self._closed_reason(closed))
        try:
            await super()._connect_async()
        except ConnectionError as exc:
            if isinstance(exc.__cause__, InvalidStatus):
                raise EnvServerError(f"{self._ws_url} refused the session: {exc.__cause__}") from exc
            raise
        return self

    async def _reset_async(self, **kwargs: Any) -> StepResult[HopgymObservation]:
        """A new episode, in delta frames (a step sends only what is new): a reset's frame always carries
        its tools, so none are kept from the last one."""
        self._tools = None
        return await super()._reset_async(delta_frames=True, **kwargs)  # type: ignore[no-any-return]

    async def _receive(self) -> dict[str, Any]:
        if _timeout is None:
            return await super()._receive()  # type: ignore[no-any-return]
        async with _timeout(self._message_timeout):
            raw = await self._ws.recv()
        return json.loads(raw)  # type: ignore[no-any-return]

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            await self._send(message)
            response = await self._receive()
        except ConnectionClosed as exc:
            raise EnvServerError(await self._closed_reason(exc)) from exc
        if response.get("type") == "error":
            data = response.get("data") or {}
            raise EnvServerError(f"{data.get('message', 'unknown error')} (code: {data.get('code', '?')})")
        return response

    async def _closed_reason(self, closed: ConnectionClosed) -> str:
        """Why the server closed the session: its last error frame, if one is still buffered, else the
        reason of its close frame (a session closed for idleness: ``--session-timeout``)."""
        assert self._ws is not None
        with contextlib.suppress(ConnectionClosed, TimeoutError, ValueError):
            last = json.loads(await asyncio.wait_for(self._ws.recv(), timeout=_REFUSAL_WAIT))
            data = last.get("data") if isinstance(last, dict) else None
            if isinstance(data, dict) and "message" in data:
                return f"the server closed the session: {data['message']} (code: {data.get('code', '?')})"
        if closed.rcvd is not None and closed.rcvd.reason:
            return f"the server closed the session: {closed.rcvd.reason} (close code {closed.rcvd.code})"
        return f"the server closed the session ({closed})"

    def _step_payload(self, action: HopgymAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[HopgymObservation]:
        """The observation with the whole chat and the tools: the server sends a step's new messages only,
        and its tools only when they changed."""
        reward, done = payload.get("reward"), bool(payload.get("done"))
        observation = HopgymObservation(**payload.get("observation", {}), reward=reward, done=done)
        start = observation.messages_from
        if start > len(self._messages):
            raise EnvServerError(
                f"the server sent messages from {start} on, but this session holds {len(self._messages)}"
            )
        if not observation.same_tools:
            self._tools = observation.tools
        elif self._tools is None:
            raise EnvServerError("the server sent the same tools as before, but this session holds none")
        self._messages = self._messages[:start] + observation.messages
        tools = list(self._tools)  # a caller editing one observation's tools leaves the next one's alone
        whole = {"messages": self._messages, "messages_from": 0, "tools": tools, "same_tools": False}
        return StepResult(observation=observation.model_copy(update=whole), reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> HopgymState:
        return HopgymState(**payload)
