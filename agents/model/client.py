"""The one model client: retries, deadlines, reply caps, token accounting, over the openai client or litellm.

An ``openai/NAME`` model on an OpenAI-compatible server given by ``api_base`` (the embedded model, vLLM,
the scripted server) is sent with the openai client, which is what litellm calls for it too; every other
model (OpenAI's own API included, which litellm adapts per model) goes through litellm. litellm costs
seconds of CPU to import (about 6 s here, per process), so it is imported only for a model that needs it,
and then offline (no cost-map fetch). The client does its own retrying (the clients' built-in retries are
off) so the count is exact and every retry is visible in the episode record. Given several servers of one
model (``api_base`` a tuple), it balances requests over them and leaves a failing one out for a while
(:class:`~hopgym.serving.endpoints.Endpoints`). Each attempt has a total deadline (``timeout``) that hopgym
enforces itself, and reads at most ``max_reply_bytes`` of the reply (:mod:`~hopgym.agents.model.reply_limit`),
on both routes.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from hopgym.errors import ConfigError, ModelError, ReplyRefusedError, one_line
from hopgym.messages import ToolCall, tool_call
from hopgym.serving.endpoints import Endpoints

# Keys of an OpenAI chat message that servers accept; anything else (e.g. CodeAct's "code") is dropped.
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
OPENAI_PREFIX = "openai/"
"""With an ``api_base``, models sent with the openai client; litellm strips the same prefix before sending.
Without one (OpenAI's own API) litellm sends them: it adapts requests per OpenAI model (o-series
``max_completion_tokens``, the Responses API for some)."""
NO_KEY = "EMPTY"
"""The key an ``openai/`` model sends to its ``api_base`` when neither ``api_key`` nor ``OPENAI_API_KEY``
gives one: a self-hosted server (vLLM, llama.cpp) takes any key unless it was started with one, and then
answers 401, which names the server; the openai client would refuse to send without a key. (A set
``OPENAI_API_KEY`` goes to whatever server ``api_base`` names.)"""
LITELLM_FIELDS = frozenset(
    {"drop_params", "num_retries", "max_retries", "headers", "api_version", "metadata", "custom_llm_provider"}
)
"""Request options litellm consumes itself instead of sending; refused on the openai client route."""
_LEADING_REASONING = re.compile(
    r"<(?:think|thinking|budget:thinking)>(.*?)</(?:think|thinking|budget:thinking)>(.*)", re.DOTALL
)
"""Reasoning text at the start of a reply's content, which litellm moves into ``reasoning_content``."""


DEFAULT_MAX_REPLY_BYTES = 4 * 2**20
"""4 MiB: about a million characters, beyond any completion a token cap allows (with logprobs of a few
thousand tokens too), while each of dozens of concurrent requests holds at most that much unparsed."""


def import_litellm() -> Any:
    """Import litellm offline and quiet: no cost-map download, no telemetry, no message logging."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:
        raise ConfigError("the model client needs litellm: pip install 'hopgym[agents]'") from exc
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.turn_off_message_logging = True
    return litellm


@dataclass
class Usage:
    """Token and request counts, summed over an episode (or a run)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    retries: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.requests += other.requests
        self.retries += other.retries

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "requests": self.requests,
            "retries": self.retries,
        }


@dataclass(frozen=True)
class ModelReply:
    """One assistant turn: the message in OpenAI form plus what it cost."""

    message: dict[str, Any]
    usage: Usage
    latency_ms: float
    finish_reason: str | None = None


@dataclass(frozen=True)
class ModelConfig:
    """How to reach a model and how to sample from it. ``temperature`` and ``max_tokens`` left None take
    what the env's protocol asks for (``info["sampling"]``), else greedy decoding and no cap."""

    model: str
    api_base: str | tuple[str, ...] | None = None
    """One server, or several replicas of the same model: requests are balanced over them."""
    api_key: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = 120.0
    """Seconds one attempt may take in all, from sending the request to the reply's last byte (a server
    that trickles bytes gets no longer); a failed attempt is retried up to ``max_retries`` times."""
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """The most bytes read of one reply; a larger or compressed one ends the request unparsed, unretried
    (:class:`~hopgym.errors.ReplyRefusedError`)."""
    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    endpoint_cooldown: float = 2.0
    """Seconds a server that failed is left out (doubling while it keeps failing, up to ``backoff_max``)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Further request fields (e.g. ``seed``), passed through unchanged: litellm keyword arguments, or for an
    ``openai/`` model the openai client's parameters, any other field going into the JSON body."""
    tool_choice_substitutes: Mapping[str, str] = field(default_factory=dict)
    """Tool-choice values the server cannot take, mapped to what is sent instead (e.g. llama-cpp-python's
    ``chatml-function-calling`` fails on ``"required"``); recorded in the run folder's run.json."""
    server_failure: Callable[[], str | None] | None = field(default=None, compare=False, repr=False)
    """For a server hopgym started: why it is gone (exit signal and log tail), or None while it runs.
    Asked when a request fails in a retryable way, so a crashed server ends the episode with that reason
    at once instead of being retried as a network error."""


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-valid copies of the messages: ``content: ""`` (not null) beside tool calls, JSON-string
    arguments, and no keys servers reject."""
    prepared = []
    for message in messages:
        clean = {key: message[key] for key in _MESSAGE_KEYS if key in message}
        if clean.get("content") is None:
            clean["content"] = ""
        if clean.get("tool_calls"):
            clean["tool_calls"] = [_prepare_tool_call(call) for call in clean["tool_calls"]]
        elif "tool_calls" in clean:
            del clean["tool_calls"]
        prepared.append(clean)
    return prepared


def _prepare_tool_call(call: Mapping[str, Any]) -> ToolCall:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    return tool_call(
        str(function.get("name", "")), {} if arguments is None else arguments, call.get("id", "")
    )


def _message_from_response(response: Any) -> tuple[dict[str, Any], str | None]:
    choice = response.choices[0]
    raw = choice.message
    message: dict[str, Any] = {"role": "assistant", "content": raw.content or ""}
    reasoning = getattr(raw, "reasoning_content", None)
    if reasoning:
        message["reasoning_content"] = reasoning
    if raw.tool_calls:
        message["tool_calls"] = [
            tool_call(call.function.name, call.function.arguments or "", call.id) for call in raw.tool_calls
        ]
    return message, choice.finish_reason


def _usage_from_response(response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        requests=1,
    )


def _refusal(exc: BaseException) -> ReplyRefusedError | None:
    """The refused reply behind ``exc``, if any: the openai client and litellm wrap whatever the reading of
    a reply raised in their own connection errors."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ReplyRefusedError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_retryable(exc: BaseException) -> bool:
    """Timeouts, connection failures, rate limits and 5xx are worth retrying; other errors are not.
    litellm's errors subclass the openai client's, so one check serves both."""
    import openai

    if isinstance(exc, (openai.APIConnectionError, openai.RateLimitError)):  # timeouts included
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


class _LitellmSender:
    """Requests through litellm, for any provider string other than ``openai/``."""

    def __init__(self, api_key: str | None) -> None:
        from hopgym.agents.model.reply_limit import limit_litellm_replies

        self._litellm = import_litellm()
        limit_litellm_replies()
        self._key = {"api_key": api_key} if api_key else {}

    async def send(self, request: dict[str, Any], base: str | None) -> Any:
        where = {"api_base": base} if base else {}
        return await self._litellm.acompletion(**request, **self._key, **where, max_retries=0, num_retries=0)


class _OpenAISender:
    """Requests to an OpenAI-compatible server (an ``openai/`` model with an ``api_base``) through the
    openai client, fields as litellm sends them: the client's own parameters by name, any other field in
    the JSON body (``extra_body``), a field left None not sent; the reply read as litellm reads it
    (reasoning, finish reason). One client per server, for the running event loop only: a client's
    connection pool belongs to the loop that opened it, so a new loop (a later ``asyncio.run``) starts
    afresh and the old loop's clients are let go."""

    def __init__(self, api_key: str | None) -> None:
        from openai.resources.chat.completions import AsyncCompletions

        self._api_key = api_key
        self._parameters = set(inspect.signature(AsyncCompletions.create).parameters) - {"self"}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[str | None, Any] = {}

    async def send(self, request: dict[str, Any], base: str | None) -> Any:
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient
        from openai.types.chat import ChatCompletion

        from hopgym.agents.model.reply_limit import EVENT_HOOKS

        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._clients = loop, {}
        if base not in self._clients:  # made here, inside the caller's error handling
            api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or NO_KEY
            http_client = DefaultAsyncHttpxClient(event_hooks=EVENT_HOOKS)
            self._clients[base] = AsyncOpenAI(
                api_key=api_key, base_url=base, max_retries=0, http_client=http_client
            )
        fields = {key: value for key, value in request.items() if value is not None}
        named = {key: value for key, value in fields.items() if key in self._parameters}
        body = named.pop("extra_body", None) or {}
        body |= {key: value for key, value in fields.items() if key not in self._parameters}
        if body:
            named["extra_body"] = body
        named["model"] = request["model"].removeprefix(OPENAI_PREFIX)
        try:
            response = await self._clients[base].chat.completions.create(**named)
        except ValueError as exc:  # a 200 reply whose body is not JSON
            raise _malformed_reply()(f"the server's reply is not JSON: {exc}", base) from exc
        if not isinstance(response, ChatCompletion) or not isinstance(response.choices, list):
            raise _malformed_reply()(f"the server's reply is not a chat completion: {response!r:.200}", base)
        for choice in response.choices:
            _move_reasoning_out_of_content(choice.message)
            choice.finish_reason = _finish_reason(choice.finish_reason, bool(choice.message.tool_calls))
        return response


@functools.cache
def _malformed_reply() -> type[Exception]:
    """The error for a 200 reply that is no chat completion (made once openai is imported): retried like a
    5xx, as on the litellm route (its 500 ``APIError``)."""
    import httpx
    import openai

    class MalformedReply(openai.APIError):
        status_code = 502

        def __init__(self, message: str, base: str | None) -> None:
            super().__init__(message, httpx.Request("POST", f"{base or ''}/chat/completions"), body=None)

    return MalformedReply


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]
"""OpenAI's finish reasons (what ``openai``'s ``Choice.finish_reason`` is typed as)."""
_FINISH_REASONS: dict[str | None, FinishReason] = {name: name for name in get_args(FinishReason)}


def _finish_reason(reason: str | None, has_tool_calls: bool) -> FinishReason:
    """The finish reason as litellm reports it for an OpenAI-compatible server: none is ``stop``, ``stop``
    beside tool calls is ``tool_calls``, and a value outside OpenAI's (vLLM's ``abort``) is ``stop``."""
    known = _FINISH_REASONS.get(reason) or "stop"
    return "tool_calls" if known == "stop" and has_tool_calls else known


def _move_reasoning_out_of_content(message: Any) -> None:
    """What litellm does to every reply, so that both routes give the same message: a reasoning field
    the server sent (``reasoning_content`` or ``reasoning``) is the reasoning; else ``<think>...</think>``
    at the start of the content is taken out of it."""
    fields = message.model_extra or {}
    if "reasoning_content" in fields:
        return
    if "reasoning" in fields:
        message.reasoning_content = fields["reasoning"]
        return
    match = _LEADING_REASONING.match(message.content or "")
    if match:
        message.reasoning_content, message.content = match.group(1), match.group(2)


class ModelClient:
    """Sends chat requests to any litellm provider string and returns :class:`ModelReply` objects
    (``openai/`` models with the openai client, the rest with litellm)."""

    def __init__(self, config: ModelConfig) -> None:
        if config.max_retries < 0 or not config.timeout > 0 or config.max_reply_bytes <= 0:
            raise ConfigError(
                "max_retries must be >= 0, timeout and max_reply_bytes > 0, got "
                f"{config.max_retries}, {config.timeout} and {config.max_reply_bytes}"
            )
        bases = config.api_base if isinstance(config.api_base, tuple) else (config.api_base,)
        urls = bool(bases) and all(isinstance(base, str) and base for base in bases)
        if isinstance(config.api_base, tuple) and not urls:
            raise ConfigError(f"api_base must be a URL or a non-empty tuple of URLs, got {config.api_base!r}")
        self.config = config
        self.endpoints = Endpoints(bases, config.endpoint_cooldown, config.backoff_max)
        try:
            import openai  # its error class is the base of every litellm error too
        except ImportError as exc:
            raise ConfigError("the model client needs openai: pip install 'hopgym[agents]'") from exc
        # The first request would import openai's ~450 resource modules lazily, inside the event loop,
        # stalling every concurrent episode for about half a second; import them now instead.
        import openai.resources.chat

        from hopgym.agents.model.reply_limit import reply_limit

        self._reply_limit = reply_limit
        self._error_base = openai.OpenAIError
        openai_server = config.model.startswith(OPENAI_PREFIX) and config.api_base is not None
        if openai_server and LITELLM_FIELDS & set(config.extra):
            raise ConfigError(
                f"{sorted(LITELLM_FIELDS & set(config.extra))} are litellm's own options; an openai/ model "
                "with an api_base is sent with the openai client (give the server's own fields instead)"
            )
        if (
            config.model.startswith(OPENAI_PREFIX)
            and config.api_base is None
            and not (config.api_key or os.environ.get("OPENAI_API_KEY"))
        ):  # litellm would report the missing key as a server error, retried on every request
            raise ConfigError(
                f"{config.model} is a model of OpenAI's API, which needs a key: pass --api-key or set "
                "OPENAI_API_KEY (or --api-base URL for an OpenAI-compatible server)"
            )
        sender = _OpenAISender if openai_server else _LitellmSender
        self._sender: _OpenAISender | _LitellmSender = sender(config.api_key)

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        stop: Sequence[str] | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> ModelReply:
        """One assistant turn; retries transient failures with exponential backoff, else raises ModelError.
        ``sampling``: the protocol's ``temperature`` / ``max_tokens``, used where the config sets none."""
        request = self._request(messages, tools, tool_choice, stop, sampling or {})
        usage = Usage()
        for attempt in range(self.config.max_retries + 1):
            started = time.perf_counter()
            endpoint = self.endpoints.acquire()
            base = self.endpoints.bases[endpoint]
            try:
                with self._reply_limit(self.config.max_reply_bytes):  # copied into wait_for's task
                    response = await asyncio.wait_for(self._sender.send(request, base), self.config.timeout)
            # the base of every error either client raises, and what it wraps a refused reply in
            except (self._error_base, ReplyRefusedError, asyncio.TimeoutError) as exc:
                refused = _refusal(exc)
                retryable = refused is None and (isinstance(exc, asyncio.TimeoutError) or is_retryable(exc))
                self.endpoints.release(endpoint, failed=retryable)
                where = f"{self.config.model}" + (f" at {base}" if base else "")
                if refused is not None:
                    raise ReplyRefusedError(f"{where}: {refused}") from exc
                # one line, and short: litellm quotes a reply it could not read whole in its message
                detail = f"{type(exc).__name__}: {one_line(str(exc), 1000)}"
                if not retryable:
                    raise ModelError(f"{where}: {detail}") from exc
                crash = self.config.server_failure() if self.config.server_failure else None
                if crash:
                    raise ModelError(f"{where}: the model server crashed: {crash}") from exc
                if attempt == self.config.max_retries:
                    attempts = f"{attempt + 1} attempt{'s' if attempt else ''}"
                    if isinstance(exc, asyncio.TimeoutError):
                        detail = f"no whole reply within {self.config.timeout:g} s (the deadline, --timeout)"
                    raise ModelError(f"{where}: gave up after {attempts}: {detail}") from exc
                usage.retries += 1
                if not self.endpoints.any_available():  # another server can take the retry at once
                    await asyncio.sleep(self._backoff(attempt))
                continue
            except BaseException:
                self.endpoints.release(endpoint, failed=False)
                raise
            self.endpoints.release(endpoint, failed=False)
            latency_ms = (time.perf_counter() - started) * 1000
            if not getattr(response, "choices", None):
                raise ModelError(f"{self.config.model}: the server returned no choices")
            message, finish_reason = _message_from_response(response)
            usage.add(_usage_from_response(response))
            return ModelReply(message, usage, latency_ms, finish_reason)
        raise AssertionError("unreachable: the loop returns or raises")

    def _request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: str | Mapping[str, Any] | None,
        stop: Sequence[str] | None,
        sampling: Mapping[str, Any],
    ) -> dict[str, Any]:
        config = self.config
        temperature = config.temperature if config.temperature is not None else sampling.get("temperature")
        max_tokens = config.max_tokens or sampling.get("max_tokens")
        request: dict[str, Any] = {
            "model": config.model,
            "messages": prepare_messages(messages),
            "temperature": 0.0 if temperature is None else temperature,
            "timeout": config.timeout,
            **config.extra,
        }
        if max_tokens:
            request["max_tokens"] = max_tokens
        if tools:
            request["tools"] = list(tools)
            if tool_choice:
                substitutes = config.tool_choice_substitutes
                if isinstance(tool_choice, str):  # {"type": "function", ...} is never substituted
                    tool_choice = substitutes.get(tool_choice, tool_choice)
                request["tool_choice"] = tool_choice
        if stop:
            request["stop"] = list(stop)
        return request

    def _backoff(self, attempt: int) -> float:
        delay = min(self.config.backoff_max, self.config.backoff_base * 2**attempt)
        return delay * (0.5 + random.random() / 2)
