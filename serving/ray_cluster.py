"""Joining a Ray cluster: for ``hopgym eval --executor ray`` and the env-server fleet
(:mod:`hopgym.serving.ray_fleet`), which both run on the cluster's nodes."""

from __future__ import annotations

import logging
from typing import Any

from hopgym.errors import ClusterError, ConfigError, one_line

EXTRA_MESSAGE = "--executor ray needs Ray: pip install 'hopgym[ray]'"


def require_ray() -> Any:
    """The ``ray`` module, or a ConfigError naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(EXTRA_MESSAGE) from exc
    return ray


def join_cluster(address: str | None) -> None:
    """Join the Ray cluster at ``address`` (None: ``RAY_ADDRESS``, else a new local instance) unless this
    process has; it stays joined until the process exits (Ray's own exit hook leaves the cluster)."""
    ray = require_ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = address or "RAY_ADDRESS or a new local instance"
        raise ClusterError(f"cannot join the Ray cluster at {where}: {one_line(str(exc))}") from exc
