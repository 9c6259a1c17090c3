"""What a run's tokens cost, from litellm's bundled price map (read offline; no price is fetched).

litellm itself (seconds to import) is imported only to price a model its map knows; whether it knows
the model is read from the map's JSON file, so runs of local and self-hosted models never import it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from hopgym.agents.model.client import import_litellm

PRICE_MAP_FILE = "model_prices_and_context_window_backup.json"
"""The price map litellm bundles and loads when told not to fetch one (``LITELLM_LOCAL_MODEL_COST_MAP``)."""


@functools.cache
def _priced_models() -> frozenset[str]:
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:  # no agents extra: prices are unknown
        return frozenset()
    return frozenset(json.loads((Path(spec.submodule_search_locations[0]) / PRICE_MAP_FILE).read_text()))


def token_cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    """US dollars for these tokens of ``model`` (a litellm provider string), or None when the bundled
    price map does not know the model (local and self-hosted models, the scripted server)."""
    priced = _priced_models()
    if not model or (model not in priced and model.split("/", 1)[-1] not in priced):
        return None
    prompt_cost, completion_cost = import_litellm().cost_per_token(
        model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    return prompt_cost + completion_cost
