"""Entry point of the embedded model server: llama-cpp-python's server plus hopgym's tool-calling chat format.

llama-cpp-python 0.3.36's ``chatml-function-calling`` cannot serve an agent loop: it describes the tools
only inside a system message (the official ToolHop prompts have none), drops ``tool`` messages from the
prompt, answers ``tool_choice="required"`` with an error, and its "message" branch is held to a grammar
that only allows a function name, so a plain final answer comes back empty.

``hopgym-tools`` is a ChatML format in the Hermes / Qwen style: the tools are listed in the system turn
(one is added when the conversation has none, as Qwen's own template does), assistant calls are written
as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and tool results come back in
``<tool_response>`` blocks. Every reply is grammar-constrained, so a 135M model still produces calls that
parse: ``required`` (or a named function) allows only a call whose name is an offered tool and whose
arguments follow that tool's JSON schema; ``auto`` allows that call or plain text. The prompt of the next
turn extends the previous one token for token, so llama.cpp re-evaluates only the new messages.
Run as ``python -m hopgym.agents.model.llama_entry`` with the arguments of ``python -m llama_cpp.server``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llama_cpp
from llama_cpp import llama_chat_format, llama_grammar, llama_types
from llama_cpp.server.__main__ import main

from hopgym.agents.model.local_server import CHAT_FORMAT

END = "<|im_end|>"
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
_SAMPLING: tuple[str, ...] = ("temperature", "top_p", "top_k", "min_p", "typical_p", "seed", "repeat_penalty")
_SAMPLING += ("presence_penalty", "frequency_penalty", "logit_bias")


def render_prompt(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
    """The ChatML prompt; the tools are appended to the system turn (one is added when there is none)."""
    messages = list(messages)
    if tools:
        signatures = "\n".join(_compact(tool.get("function", tool)) for tool in tools)
        listing = TOOLS_PREAMBLE.format(tools=signatures)
        if messages and messages[0].get("role") == "system":
            messages[0] = {"role": "system", "content": f"{messages[0].get('content') or ''}\n\n{listing}"}
        else:
            messages.insert(0, {"role": "system", "content": listing})
    parts = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":  # consecutive results share one user turn
            opens = index == 0 or messages[index - 1].get("role") != "tool"
            closes = index == len(messages) - 1 or messages[index + 1].get("role") != "tool"
            parts.append(
                ("<|im_start|>user\n" if opens else "\n")
                + f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"
                + (f"{END}\n" if closes else "")
            )
            continue
        body = _text(message.get("content"))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                with contextlib.suppress(json.JSONDecodeError):  # else shown as the model wrote it
                    arguments = json.loads(arguments)
            call_json = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
            body += f"{chr(10) if body else ''}<tool_call>\n{call_json}\n</tool_call>"
        parts.append(f"<|im_start|>{role}\n{body}{END}\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def _compact(value: Any) -> str:
    """JSON without optional spaces: ToolHop's tool documents are long, and every prompt token costs."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return content or ""


def tool_call_grammar(
    tools: Sequence[Mapping[str, Any]], tool_choice: Any, parses: Callable[[str], bool]
) -> str | None:
    """GBNF for one reply: a ``<tool_call>`` whose name is an offered tool and whose arguments follow its
    schema; ``auto`` (or no choice) also allows plain text, ``none`` or no tools leave the reply free.

    ``parses`` says whether llama.cpp accepts a grammar: a tool whose schema it cannot express (the
    converter writes invalid GBNF for some ``pattern`` values) gets arguments held only to a JSON object.
    """
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, Mapping):
        wanted = (tool_choice.get("function") or {}).get("name")
        tools = [tool for tool in tools if tool["function"]["name"] == wanted]
        if not tools:
            raise ValueError(f"tool_choice names {wanted!r}, which is not among the offered tools")
    calls = [_call_schema(tool["function"], parses) for tool in tools]
    grammar = _call_rules({"anyOf": calls} if len(calls) > 1 else calls[0])
    if tool_choice in (None, "auto"):
        grammar = f"root ::= {_CALL} | hopgym-text\nhopgym-text ::= [^<] [^<]*\n{grammar}"
    else:
        grammar = f"root ::= {_CALL}\n{grammar}"
    if not parses(grammar):
        raise ValueError("the tool-call grammar does not parse; see the server log")
    return grammar


_CALL = r'"<tool_call>\n" hopgym-call "\n</tool_call>"'


def _call_rules(schema: Mapping[str, Any]) -> str:
    """GBNF rules for one call, its top rule named ``hopgym-call``."""
    return llama_grammar.json_schema_to_gbnf(json.dumps(schema)).replace("root ::= ", "hopgym-call ::= ", 1)


def _call_schema(function: Mapping[str, Any], parses: Callable[[str], bool]) -> dict[str, Any]:
    """The JSON schema of one call of ``function``; arguments without a usable schema are any object."""
    key = _compact(function)
    if key not in _CALL_SCHEMAS:
        schema = _named_call(function["name"], function.get("parameters"))
        try:
            usable = parses(f"root ::= {_CALL}\n{_call_rules(schema)}")
        except Exception:  # the converter raises anything on schemas it cannot express
            usable = False
        if not usable:
            print(f"hopgym-tools: {function['name']}: arguments held only to a JSON object", file=sys.stderr)
            schema = _named_call(function["name"], {"type": "object"})
        _CALL_SCHEMAS[key] = schema
    return _CALL_SCHEMAS[key]


_CALL_SCHEMAS: dict[str, dict[str, Any]] = {}
"""Call schemas by tool document: every turn of an episode offers the same tools."""


def _named_call(name: str, parameters: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": {"const": name},
            "arguments": parameters if isinstance(parameters, Mapping) else {"type": "object"},
        },
        "required": ["name", "arguments"],
    }


def grammar_parser(llama: Any) -> Callable[[str], bool]:
    """Whether llama.cpp accepts a grammar for this model (it crashes on one it rejects mid-request)."""

    def parses(rules: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, rules.encode(), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    return parses


def parse_reply(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The reply's content and its tool calls (OpenAI form); a call cut off at ``max_tokens`` is kept as
    written, so the env records its arguments as invalid rather than losing the call."""
    head, tag, rest = text.partition("<tool_call>")
    if not tag:
        return text.strip(), []
    body = rest.split("</tool_call>")[0].strip()
    try:
        call = json.loads(body)
        name, arguments = call["name"], json.dumps(call["arguments"], ensure_ascii=False)
    except (json.JSONDecodeError, KeyError, TypeError):
        name, arguments = body.partition('"name": "')[2].partition('"')[0], body
    tool_call: dict[str, Any] = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function"}
    tool_call["function"] = {"name": name, "arguments": arguments}
    return head.strip(), [tool_call]


@llama_chat_format.register_chat_completion_handler(CHAT_FORMAT)
def hopgym_tools(
    llama: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: Any = None,
    stop: str | list[str] | None = None,
    max_tokens: int | None = None,
    response_format: llama_types.ChatCompletionRequestResponseFormat | None = None,
    grammar: Any = None,
    stream: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """One chat completion in the ``hopgym-tools`` format (non-streaming)."""
    if stream:
        raise ValueError(f"the {CHAT_FORMAT} chat format does not stream; send stream=false")
    tools = list(tools or ())
    rules = tool_call_grammar(tools, tool_choice, grammar_parser(llama))
    if rules is not None:
        grammar = llama_grammar.LlamaGrammar.from_string(rules, verbose=False)
    elif response_format is not None and grammar is None:
        grammar = llama_chat_format._grammar_for_response_format(response_format)
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    completion = llama.create_completion(
        prompt=render_prompt(messages, tools),
        stop=[*stops, END],
        max_tokens=max_tokens,
        grammar=grammar,
        **{key: kwargs[key] for key in _SAMPLING if kwargs.get(key) is not None},
    )
    choice = completion["choices"][0]
    content, tool_calls = parse_reply(choice["text"])
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chat{completion['id']}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": completion["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else choice["finish_reason"],
            }
        ],
        "usage": completion["usage"],
    }


if __name__ == "__main__":
    main()
