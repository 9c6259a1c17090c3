"""Options of hopgym's registered envs, checked before an env is made (a typo is named with what is valid).

Here, not in ``hopgym/options.py``: reading an env's options loads its entry point, an envs module, so the
check belongs to the envs layer (``hopgym/options.py`` is the bottom and imports no layer above it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from hopgym import ENV_IDS
from hopgym.envs.chat import ChatToolEnv
from hopgym.errors import ConfigError
from hopgym.options import check_keywords


def check_env_options(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` unless ``env_id`` is one of hopgym's envs and takes every key of
    ``kwargs`` (``hopgym:ToolHop-v0`` names ``ToolHop-v0``)."""
    name = registered_id(env_id)
    check_keywords(env_creator(gym.spec(name)), kwargs, f"env {name}")


def registered_id(env_id: str) -> str:
    """``env_id`` without its ``hopgym:`` prefix; :class:`ConfigError` when hopgym registers no such env."""
    name = env_id.removeprefix("hopgym:")
    if name not in ENV_IDS:
        close = difflib.get_close_matches(name, ENV_IDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown env {env_id!r}{hint}; valid: {', '.join(ENV_IDS)}")
    return name


def env_class(env_id: str) -> type[ChatToolEnv[Any]]:
    """The class the registry makes for ``env_id``: what callers ask about an env (``issubclass``, its class
    attributes) instead of comparing env-id strings, so a new env built on one is treated as that one."""
    creator = env_creator(gym.spec(registered_id(env_id)))
    if not (isinstance(creator, type) and issubclass(creator, ChatToolEnv)):
        raise ConfigError(f"env {env_id} is not made by one of hopgym's chat env classes")
    return creator


def env_creator(spec: EnvSpec) -> Callable[..., Any]:
    """What ``gym.make`` calls for ``spec``: its entry point, imported when it is a ``module:name`` string."""
    entry_point = spec.entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if creator is None:
        raise ConfigError(f"env {spec.id} is registered without an entry point")
    return creator
