"""System prompts for the three ToolHop scenarios, in the spirit of the official evaluation."""

from __future__ import annotations

from hopgym.errors import ConfigError

SYSTEM_PROMPTS = {
    "direct": (
        "You are a helpful assistant. Answer the user's question directly from your own knowledge; "
        "no tools are available. Reason step by step if needed, and end with the final answer."
    ),
    "mandatory": (
        "You are a helpful assistant that solves multi-hop questions with the provided tools. "
        "You must use the tools at every step: decompose the question into sub-questions, call a tool "
        "for each of them, and use each tool's result as input for the next step. Do not answer from "
        "your own knowledge: the final answer must come from the tool results. When the tools have given "
        "you the answer, reply with the final answer without calling a tool."
    ),
    "free": (
        "You are a helpful assistant. You may use the provided tools to answer the user's question, or "
        "answer directly if you do not need them. When you are done, reply with the final answer without "
        "calling a tool."
    ),
}
SCENARIOS = tuple(SYSTEM_PROMPTS)


def system_prompt(scenario: str) -> str:
    try:
        return SYSTEM_PROMPTS[scenario]
    except KeyError:
        raise ConfigError(f"unknown scenario {scenario!r}; valid scenarios: {list(SCENARIOS)}") from None
