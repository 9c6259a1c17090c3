"""A cap on the bytes read of a model server's reply, whatever the server declares or sends.

A reply is hostile input: an endless body would grow the process until the OOM killer ends the whole run,
and one of 50 MiB costs hundreds of MiB of parsed objects. While :func:`reply_limit` is in force (the model
client holds it around each request), every response the request receives is read through a counter that
cuts it off past the cap with :class:`~hopgym.errors.ReplyRefusedError`, before it is parsed; a declared
``Content-Length`` over the cap is refused unread. Compression is not asked for, and a compressed reply is
refused: one chunk of gzip, Brotli or zstd can decode to many times the cap before any count could stop it.

The counter sits on the httpx client: a pair of event hooks on the one the openai client is given
(:data:`EVENT_HOOKS`), and for litellm, which builds its own clients, on every transport it makes
(:func:`limit_litellm_replies`). Outside :func:`reply_limit` both pass everything through unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from hopgym.errors import ReplyRefusedError

_LIMIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("hopgym_reply_limit", default=None)


@contextlib.contextmanager
def reply_limit(max_bytes: int) -> Iterator[None]:
    """Cap every model reply received in this context (this task, and the tasks it starts)."""
    token = _LIMIT.set(max_bytes)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _too_large(max_bytes: int) -> ReplyRefusedError:
    return ReplyRefusedError(f"the reply is larger than {max_bytes} bytes (the cap, --max-reply-bytes)")


class _CappedStream(httpx.AsyncByteStream):
    """A response body that raises once more than ``max_bytes`` of it arrived."""

    def __init__(self, stream: httpx.AsyncByteStream, max_bytes: int) -> None:
        self._stream = stream
        self._max_bytes = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._max_bytes:
                raise _too_large(self._max_bytes)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _ask_uncompressed(request: httpx.Request) -> None:
    if _LIMIT.get() is not None:
        request.headers["Accept-Encoding"] = "identity"


def _cap(response: httpx.Response) -> None:
    """Refuse ``response`` if it declares too much or is compressed, else read it through the counter."""
    max_bytes = _LIMIT.get()
    if max_bytes is None:
        return
    declared = response.headers.get("Content-Length", "")
    # ASCII digits only ("²".isdigit() holds, int("²") raises); past 18 digits it is too large unread.
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > max_bytes):
        raise _too_large(max_bytes)
    encodings = {value.strip().lower() for value in response.headers.get_list("Content-Encoding", True)}
    if encodings - {"", "identity"}:
        raise ReplyRefusedError(
            f"the reply is compressed ({', '.join(sorted(encodings))}) though none was asked for: its size "
            "could not be bounded before decoding"
        )
    if not isinstance(response.stream, httpx.AsyncByteStream):
        raise TypeError(f"a model reply read without asyncio: {type(response.stream).__name__}")
    response.stream = _CappedStream(response.stream, max_bytes)


async def _request_hook(request: httpx.Request) -> None:
    _ask_uncompressed(request)


async def _response_hook(response: httpx.Response) -> None:
    _cap(response)  # httpx closes the response when a hook raises


EVENT_HOOKS: dict[str, list[Any]] = {"request": [_request_hook], "response": [_response_hook]}
"""httpx event hooks for a client of model servers: the cap of :func:`reply_limit` on all it receives."""


def _capped(transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """``transport``, its responses capped while :func:`reply_limit` is in force. Its own method is wrapped
    (not the transport): litellm picks how to close a client by the type of its transport."""
    send = transport.handle_async_request

    async def handle_async_request(request: httpx.Request) -> httpx.Response:
        _ask_uncompressed(request)
        response = await send(request)
        try:
            _cap(response)
        except BaseException:
            await response.aclose()
            raise
        return response

    transport.handle_async_request = handle_async_request  # type: ignore[method-assign]
    return transport


def limit_litellm_replies() -> None:
    """Cap the responses of every asyncio transport litellm builds from now on: its own HTTP handler and
    the openai clients it makes both take theirs from ``AsyncHTTPHandler._create_async_transport`` (where
    None means httpx's default transport). litellm is pinned; the model client's tests attack both."""
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    make = AsyncHTTPHandler._create_async_transport
    if getattr(make, "hopgym_capped", False):
        return

    def capped(*args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return _capped(make(*args, **kwargs) or httpx.AsyncHTTPTransport())

    capped.hopgym_capped = True  # type: ignore[attr-defined]
    AsyncHTTPHandler._create_async_transport = staticmethod(capped)  # type: ignore[method-assign,assignment]
