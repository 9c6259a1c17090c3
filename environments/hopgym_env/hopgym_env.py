"""The verifiers environment module of hopgym: ``vf-eval hopgym-env -a '{"env": "FamilyTool-v0", ...}'``.

verifiers passes its own ``env_id`` (this module's name) apart from the environment's arguments, so the
hopgym env id is the argument ``env``; every other argument is an env kwarg (or ``concurrency``)."""

from __future__ import annotations

from typing import Any

from hopgym.serving import verifiers_env


def load_environment(env: str = "ToolHop-v0", **env_kwargs: Any) -> Any:
    return verifiers_env.load_environment(env_id=env, **env_kwargs)
