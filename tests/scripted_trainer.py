"""A stand-in for the GRPO trainer in rollout tests: the replies are scripted, the rest is TRL's own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ScriptedTrainer:
    """The two trainer methods the rollout uses, with replies written by ``reply(prompt text)`` instead of
    a model: TRL's own tool-result tokens (its ``_get_tool_suffix_ids``, called on this object) on a real
    tokenizer. ``max_completion_length`` is the completion's token budget."""

    use_vllm = False
    generation_config = None
    chat_template = None
    chat_template_kwargs: dict = {}  # noqa: RUF012 - read-only
    _is_vlm = False

    def __init__(self, tokenizer: Any, reply: Callable[[str], str], max_completion_length: int = 400) -> None:
        self.processing_class = self._tokenizer = tokenizer
        self.reply = reply
        self.max_completion_length = max_completion_length

    def _get_tool_suffix_ids(self, *args, **kwargs):
        from trl import GRPOTrainer

        return GRPOTrainer._get_tool_suffix_ids(self, *args, **kwargs)

    def _generate_single_turn(self, prompt_ids, images, fields, count):
        texts = [self.reply(self.processing_class.decode(ids)) for ids in prompt_ids]
        return [self.processing_class(text, add_special_tokens=False)["input_ids"] for text in texts], None
