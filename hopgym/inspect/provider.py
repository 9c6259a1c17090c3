"""The ``hopgym`` model provider of Inspect: ``--model hopgym/MODEL`` sends every request through hopgym's
own :class:`~hopgym.agents.model.client.ModelClient`, the client ``hopgym eval --model MODEL`` uses (its
retries, deadlines, reply cap and reply parsing), so an Inspect run and a hopgym run ask the model the same
thing. It also needs no openai>=3.4, which Inspect's own OpenAI providers do and litellm's pin rules out.

``--model-base-url`` is the client's ``api_base`` and ``-M api_key=KEY`` its key; any other ``-M`` option
is a :class:`~hopgym.agents.model.client.ModelConfig` field (``-M timeout=60``, ``-M extra='{"seed": 1}'``).
From Inspect's GenerateConfig the request takes ``temperature``, ``max_tokens`` and ``stop_seqs``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    StopReason,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from hopgym.agents.model.client import ModelClient, ModelConfig, ModelReply
from hopgym.errors import ConfigError
from hopgym.inspect.messages import chat_message, openai_message, openai_tool, openai_tool_choice

MODEL_ARGS = tuple(
    field.name
    for field in dataclasses.fields(ModelConfig)
    if field.name not in ("model", "api_base", "api_key", "server_failure")
)
"""The ``-M`` options: ModelConfig's fields that a command line can give."""
REQUEST_FIELDS = (
    "top_p",
    "top_k",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "num_choices",
    "best_of",
    "logprobs",
    "top_logprobs",
    "parallel_tool_calls",
    "reasoning_effort",
    "reasoning_tokens",
    "response_schema",
    "extra_body",
)
"""GenerateConfig fields that would change the request; hopgym's client takes them as ``-M extra``, so a
run records them where ``hopgym eval`` records its own (refused here rather than silently not sent)."""
NO_TOOL_CHOICE: ContextVar[bool] = ContextVar("hopgym_no_tool_choice", default=False)
"""Set by hopgym's solver while the env names no tool choice (the official ToolHop protocol): Inspect's
``"auto"`` is then only its default, and no tool choice is sent, as hopgym's agent sends none."""
STOP_REASONS: Mapping[str | None, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
"""OpenAI's finish reasons (as the client reports them) as Inspect's stop reasons."""


def model_config(
    model_name: str, base_url: str | None, api_key: str | None, model_args: Mapping[str, Any]
) -> ModelConfig:
    """The client's config of ``--model hopgym/MODEL_NAME``; an unknown ``-M`` option is a ConfigError
    naming the valid ones."""
    unknown = sorted(set(model_args) - set(MODEL_ARGS))
    if unknown:
        raise ConfigError(f"-M {', '.join(unknown)}: the hopgym provider takes -M {', '.join(MODEL_ARGS)}")
    return ModelConfig(model=model_name, api_base=base_url, api_key=api_key, **model_args)


def model_output(reply: ModelReply, model_name: str) -> ModelOutput:
    """The client's reply as Inspect's output: the message (tool calls, reasoning), stop reason, usage."""
    message = chat_message(reply.message)
    assert isinstance(message, ChatMessageAssistant)
    message.model, message.source = model_name, "generate"
    usage, stop_reason = reply.usage, STOP_REASONS.get(reply.finish_reason, "unknown")
    return ModelOutput(
        model=model_name,
        choices=[ChatCompletionChoice(message=message, stop_reason=stop_reason)],
        usage=ModelUsage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            total_tokens=usage.prompt_tokens + usage.completion_tokens,
        ),
        time=reply.latency_ms / 1000,
        metadata={"requests": usage.requests, "retries": usage.retries},
    )


class HopgymModelAPI(ModelAPI):
    """Inspect's model API over hopgym's :class:`ModelClient` (which retries itself: Inspect does not)."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_vars: list[str] | None = None,
        config: GenerateConfig | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, api_key_vars or [], config or GenerateConfig())
        self.client = ModelClient(model_config(model_name, base_url, api_key, model_args))

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        asked = sorted(name for name in REQUEST_FIELDS if getattr(config, name) is not None)
        if asked:
            raise ConfigError(
                f"GenerateConfig {', '.join(asked)}: the hopgym provider sends temperature, max_tokens and "
                "stop_seqs; give other request fields as -M extra='{...}'"
            )
        unset = NO_TOOL_CHOICE.get() and tool_choice == "auto"
        reply = await self.client.complete(
            [openai_message(message) for message in input],
            tools=[openai_tool(tool) for tool in tools] or None,
            tool_choice=openai_tool_choice(tool_choice) if tools and not unset else None,
            stop=config.stop_seqs,
            sampling={"temperature": config.temperature, "max_tokens": config.max_tokens},
        )
        return model_output(reply, self.model_name)

    def tools_required(self) -> bool:
        """Tools stay in a request whose tool choice is ``"none"`` (Inspect would drop them): an env that
        offers tools and asks for no call (ToolHop's direct scenario) gets both sent, as hopgym's agent
        sends them."""
        return True
