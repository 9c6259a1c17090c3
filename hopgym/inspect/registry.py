"""Registers the ``hopgym`` model provider with Inspect (``--model hopgym/MODEL``). Inspect imports this
module through the ``inspect_ai`` entry point in pyproject.toml at every start, so it imports only Inspect's
registry: the provider and hopgym's model client load when a ``hopgym/`` model is used."""

from __future__ import annotations

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="hopgym")
def hopgym() -> type[ModelAPI]:
    from hopgym.inspect.provider import HopgymModelAPI

    return HopgymModelAPI
