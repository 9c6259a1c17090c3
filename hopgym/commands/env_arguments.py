"""The command-line options that name an env and its kwargs, shared by ``hopgym eval`` and
``hopgym serve env`` and ``hopgym train grpo``: ``--env-arg KEY=VALUE`` is parsed one way everywhere."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from hopgym.envs.env_checker import DISABLE_ENV_CHECKER
from hopgym.errors import ConfigError


def parse_key_values(pairs: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; VALUE is parsed as JSON when it parses, else kept as a string."""
    result: dict[str, Any] = {}
    for pair in pairs or ():
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            result[key] = json.loads(raw)
        except json.JSONDecodeError:
            result[key] = raw
    return result


def add_env_arguments(parser: argparse.ArgumentParser, default_env: str = "ToolHop-v0") -> None:
    """The options that choose the env and its kwargs (read back by :func:`env_kwargs_from`)."""
    parser.add_argument("--env", default=default_env, help=f"gymnasium env id (default: {default_env})")
    parser.add_argument("--scenario", help="direct | mandatory | free (passed to the env)")
    parser.add_argument("--feedback", help="detailed | minimal (passed to the env)")
    parser.add_argument("--data", help="dataset file, passed to the env as data_path")
    parser.add_argument("--env-arg", action="append", metavar="KEY=VALUE", help="any other env kwarg")
    parser.add_argument(
        "--disable-env-checker",
        action="store_true",
        help="skip the env contract checks on each env's first reset and step (the env kwarg "
        "disable_env_checker=true, as in gymnasium.make)",
    )


def env_kwargs_from(args: argparse.Namespace) -> dict[str, Any]:
    """The env's keyword arguments from ``--env-arg`` and the shortcuts (``--data``, ``--scenario`` ...)."""
    kwargs = parse_key_values(args.env_arg, "--env-arg")
    for key, value in (("data_path", args.data), ("scenario", args.scenario), ("feedback", args.feedback)):
        if value is not None:
            kwargs[key] = value
    if args.disable_env_checker:
        kwargs[DISABLE_ENV_CHECKER] = True
    return kwargs


def add_env_url_argument(parser: argparse.ArgumentParser) -> None:
    """``--env-url``: episodes played on ``hopgym serve env`` servers (read by ``serve.env_rollouts``)."""
    parser.add_argument(
        "--env-url",
        action="append",
        default=[],
        metavar="URL",
        help="a hopgym serve env server to play episodes on (repeatable: each episode goes to the least "
        "loaded; one that dies has its episodes played again on another); the servers must serve --env "
        "with these env kwargs; their API key from $HOPGYM_SERVE_API_KEY (default: in this process)",
    )
