"""Options of hopgym's registered envs, checked before an env is made (a typo is named with what is valid).

Here, not in ``hopgym/options.py``: reading an env's options loads its entry point, an envs module, so the
check belongs to the envs layer (``hopgym/options.py`` is the bottom and imports no layer above it).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from hopgym import ENV_IDS
from hopgym.envs.chat import ChatToolEnv
from hopgym.envs.env_checker import env_checker_option
from hopgym.errors import ConfigError
from hopgym.options import check_keywords


def check_env_options(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` unless ``env_id`` is a chat env (see :func:`registered_id`) that takes
    every key of ``kwargs`` (``hopgym:ToolHop-v0`` names ``ToolHop-v0``), besides Gymnasium's
    :data:`~hopgym.envs.env_checker.DISABLE_ENV_CHECKER`, which turns off the run-time contract checks."""
    name = registered_id(env_id)
    check_keywords(env_creator(gym.spec(name)), env_checker_option(kwargs)[1], f"env {name}")


def registered_id(env_id: str, import_module: bool = True) -> str:
    """The id ``gym.spec`` knows ``env_id`` by: one of hopgym's (its ``hopgym:`` prefix dropped), or a
    third-party id registered to a :class:`ChatToolEnv` subclass (``module:Env-v0`` imports ``module`` first,
    as ``gym.make`` does, unless ``import_module`` is False: an id read from a run folder, which is data, is
    looked up among the envs this process registered); :class:`ConfigError` for any other."""
    name = env_id.removeprefix("hopgym:")
    if name in ENV_IDS:
        return name
    module, _, name = env_id.rpartition(":")
    if module and import_module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ConfigError(f"env {env_id!r}: module {module!r} cannot be imported ({exc})") from None
    spec = gym.registry.get(name)
    if spec is not None and _is_chat_env(env_creator(spec)):
        return name
    close = difflib.get_close_matches(name, ENV_IDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    what = f"env {env_id!r} is no chat env" if spec is not None else f"unknown env {env_id!r}"
    raise ConfigError(
        f"{what}{hint}; valid: {', '.join(ENV_IDS)}, or an id registered with gymnasium.register to a "
        "ChatToolEnv subclass (module:Env-v0 imports the module that registers it)"
    )


def _is_chat_env(creator: Callable[..., Any]) -> TypeGuard[type[ChatToolEnv[Any]]]:
    return isinstance(creator, type) and issubclass(creator, ChatToolEnv)


def env_class(env_id: str, import_module: bool = True) -> type[ChatToolEnv[Any]]:
    """The class the registry makes for ``env_id``: what callers ask about an env (``issubclass``, its class
    attributes) instead of comparing env-id strings, so a new env built on one is treated as that one.
    ``import_module``: see :func:`registered_id` (False for an id read from a run folder)."""
    creator = env_creator(gym.spec(registered_id(env_id, import_module)))
    if not _is_chat_env(creator):
        raise ConfigError(f"env {env_id} is not made by one of hopgym's chat env classes")
    return creator


def env_creator(spec: EnvSpec) -> Callable[..., Any]:
    """What ``gym.make`` calls for ``spec``: its entry point, imported when it is a ``module:name`` string."""
    entry_point = spec.entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if creator is None:
        raise ConfigError(f"env {spec.id} is registered without an entry point")
    return creator
