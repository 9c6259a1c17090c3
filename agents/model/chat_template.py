"""The chat template and reply parser a trained model is read with, by training and by evaluation alike.

A tokenizer whose own template cannot render tools (SmolLM2's is ChatML without tools) gets TRL's Qwen2.5
template: the same ChatML turns, plus the tools in the system turn and ``<tool_call>`` /
``<tool_response>`` blocks, the format hopgym's embedded server speaks (agents/model/llama_entry.py), and
TRL's response parser for it. It lives here, below ``train``, so that the checkpoint server
(agents/model/checkpoint_entry.py) prompts and parses a checkpoint exactly as its training did.
"""

from __future__ import annotations

from typing import Any

from hopgym.errors import ConfigError

CHATML_START = "<|im_start|>"


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give ``tokenizer`` a chat template that renders tool calls and results, TRL's parser for its
    replies, a pad token and left padding (what ``GRPOTrainer`` expects)."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        if CHATML_START not in tokenizer.get_vocab():
            raise ConfigError(
                "the model's chat template cannot render tool calls and its vocabulary has no ChatML tokens; "
                "use a model whose template supports tools (Qwen2.5/3, Llama 3.1/3.2, ...)"
            )
        tokenizer.chat_template = qwen2_5_chat_template
    if (
        getattr(tokenizer, "response_template", None) is None
        and getattr(tokenizer, "response_schema", None) is None
    ):
        add_response_schema(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer
