"""Launching ``vllm serve`` with automatic tool choice and the tool-call parser of the model's family.

vLLM is an optional extra (``hopgym[vllm]``); hopgym only builds the command, starts it and waits for the
OpenAI-compatible endpoint. Clients then use the litellm provider string ``hosted_vllm/MODEL``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hopgym.agents.model.server_process import ServerProcess
from hopgym.errors import ConfigError

# (substring of the lower-cased model name, vLLM tool-call parser); the first match wins, so the more
# specific names come first.
TOOL_CALL_PARSERS: tuple[tuple[str, str], ...] = (
    ("qwen3-coder", "qwen3_coder"),
    ("qwen", "hermes"),
    ("hermes", "hermes"),
    ("llama-4", "llama4_pythonic"),
    ("llama4", "llama4_pythonic"),
    ("llama", "llama3_json"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("granite", "granite"),
    ("internlm", "internlm"),
    ("deepseek-v3", "deepseek_v3"),
    ("deepseek-r1", "deepseek_v3"),
    ("glm-4.5", "glm45"),
    ("gpt-oss", "openai"),
    ("kimi-k2", "kimi_k2"),
    ("phi-4-mini", "phi4_mini_json"),
    ("xlam", "xlam"),
    ("hunyuan", "hunyuan_a13b"),
)


def tool_call_parser_for(model: str) -> str:
    """The vLLM ``--tool-call-parser`` for a model family, or ConfigError asking for an explicit one."""
    lowered = model.lower()
    for fragment, parser in TOOL_CALL_PARSERS:
        if fragment in lowered:
            return parser
    families = ", ".join(sorted({fragment for fragment, _ in TOOL_CALL_PARSERS}))
    raise ConfigError(
        f"no known tool-call parser for model {model!r} (known families: {families}); "
        "pass one with --tool-call-parser"
    )


def vllm_command(
    model: str, port: int, tool_call_parser: str | None = None, extra_args: Sequence[str] = ()
) -> list[str]:
    """``vllm serve MODEL`` on 127.0.0.1 with auto tool choice; extra arguments are appended verbatim."""
    return [
        "vllm",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_call_parser or tool_call_parser_for(model),
        *extra_args,
    ]


def vllm_server(
    model: str,
    port: int | None = None,
    tool_call_parser: str | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 1800.0,
) -> ServerProcess:
    """A not-yet-started vLLM server (loading weights can take many minutes, hence the long timeout)."""
    return ServerProcess.on_loopback(
        "vllm", lambda free: vllm_command(model, free, tool_call_parser, extra_args), port, startup_timeout
    )


def vllm_model_string(model: str) -> str:
    return f"hosted_vllm/{model}"
