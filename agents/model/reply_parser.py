"""The one reader of a reply a trained model wrote as token ids: TRL's parser for the chat template, inside
hopgym's bounds for model text.

Training samples anything, and one reply must never end a run: TRL's ``parse_response`` catches only
``ValueError`` and ``TypeError``, so a ``<tool_call>`` holding 1,100 nested ``[`` (about 1,100 tokens)
raised ``RecursionError`` out of the GRPO rollout and stopped the trainer. Here a reply longer than
:data:`~hopgym.model_text.MAX_PARSED_CHARS` characters or nested deeper than
:data:`~hopgym.model_text.MAX_JSON_DEPTH` brackets is not parsed at all, and any exception of the parser is
an unreadable reply: both are ``None``, a malformed reply for its episode. Every other reply reads exactly as
``parse_response`` reads it. Training (:mod:`hopgym.train.rollout`) and checkpoint evaluation share this
reader, so a checkpoint is scored on replies read as it was trained on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hopgym.model_text import MAX_PARSED_CHARS, nested_deeper


def parse_reply(
    tokenizer: Any, ids: Sequence[int], prefix: Sequence[int], tools: list[dict[str, Any]] | None
) -> dict[str, Any] | None:
    """TRL's message (``role``, ``content``, ``tool_calls`` when it made calls) for the reply ``ids`` that
    followed the prompt tokens ``prefix``, its calls' arguments typed by ``tools``' schemas; ``None`` when
    the reply is past hopgym's bounds or the parser fails on it (see the module docstring)."""
    from trl.chat_template_utils import parse_response

    text = tokenizer.decode(list(ids))
    if len(text) > MAX_PARSED_CHARS or nested_deeper(text):
        return None
    try:
        message: dict[str, Any] = parse_response(tokenizer, list(ids), prefix=list(prefix), tools=tools)
    except Exception:  # whatever the parser raises, the reply is unreadable: its episode's, not the run's end
        return None
    return message
