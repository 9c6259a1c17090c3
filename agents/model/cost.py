"""What a run's tokens cost, from litellm's bundled price map (read offline; no price is fetched)."""

from __future__ import annotations

import functools
from typing import Any

from hopgym.agents.model.client import import_litellm
from hopgym.errors import ConfigError


@functools.cache
def _litellm() -> Any | None:
    try:
        return import_litellm()
    except ConfigError:  # the report works without the agents extra; prices are then unknown
        return None


def token_cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    """US dollars for these tokens of ``model`` (a litellm provider string), or None when the bundled
    price map does not know the model (local and self-hosted models, the scripted server)."""
    litellm = _litellm()
    if not model or litellm is None:
        return None
    known = model in litellm.model_cost or model.split("/", 1)[-1] in litellm.model_cost
    if not known:
        return None
    prompt_cost, completion_cost = litellm.cost_per_token(
        model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    return prompt_cost + completion_cost
