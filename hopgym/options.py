"""Keyword options checked against what they are for, so a typo is named with what would be valid."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from hopgym.errors import ConfigError


def accepted_keywords(target: Callable[..., Any]) -> list[str] | None:
    """The keyword arguments ``target`` takes (``self`` aside), or None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(target).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in keyword_kinds and p.name != "self"]


def check_keywords(target: Callable[..., Any], given: Mapping[str, Any], what: str) -> None:
    """Raise :class:`ConfigError` naming each key of ``given`` that ``target`` does not take, with the
    closest valid name and the full list."""
    accepted = accepted_keywords(target)
    if accepted is None:
        return
    unknown = [key for key in given if key not in accepted]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), accepted, n=1)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ConfigError(f"{what} has no option {', '.join(named)}; valid: {', '.join(accepted) or 'none'}")


def check_env_options(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` unless ``env_id`` is one of hopgym's envs and takes every key of
    ``kwargs`` (``hopgym:ToolHop-v0`` names ``ToolHop-v0``)."""
    import hopgym

    name = env_id.removeprefix("hopgym:")
    if name not in hopgym.ENV_IDS:
        close = difflib.get_close_matches(name, hopgym.ENV_IDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown env {env_id!r}{hint}; valid: {', '.join(hopgym.ENV_IDS)}")
    check_keywords(env_creator(gym.spec(name)), kwargs, f"env {name}")


def env_creator(spec: EnvSpec) -> Callable[..., Any]:
    """What ``gym.make`` calls for ``spec``: its entry point, imported when it is a ``module:name`` string."""
    entry_point = spec.entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if creator is None:
        raise ConfigError(f"env {spec.id} is registered without an entry point")
    return creator
