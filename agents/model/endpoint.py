"""The model server a run talks to: the one the caller names, the embedded local server (``model`` is
``"local"``) or the checkpoint server (``model`` is an existing folder, a trained model, and no server is
named: with ``api_base`` the folder is the name the caller's server knows it by, e.g. vLLM serving it),
started for the run's duration. Both come out as
:class:`~hopgym.agents.model.client.ModelConfig` fields, with the timeout and reply cap that suit the
server."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError

DEFAULT_TIMEOUT = 120.0
DEFAULT_LOCAL_MAX_TOKENS = 512
"""The embedded 135M model can ramble until its context is full; cap its replies unless told otherwise."""
DEFAULT_LOCAL_TIMEOUT = 600.0
"""llama-cpp's server answers one request at a time and keeps generating for a client that gave up, so a
short timeout only queues retries behind the abandoned request on a busy CPU."""


@contextlib.contextmanager
def model_endpoint(
    model: str,
    api_base: str | tuple[str, ...] | None = None,
    api_key: str | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    executor: str = "local",
) -> Iterator[dict[str, Any]]:
    """ModelConfig fields naming the model and its server; ``local`` runs the embedded server meanwhile, a
    folder the checkpoint server."""
    if model == "local" and executor == "ray":
        raise ConfigError(
            "--model local serves this machine only; with --executor ray pass --model and --api-base of "
            "a model server every node can reach"
        )
    if model != "local" and api_base is None and Path(model).is_dir():
        yield from _checkpoint_endpoint(Path(model), max_tokens, timeout, executor)
        return
    if model != "local":
        yield {
            "model": model,
            "api_base": api_base,
            "api_key": api_key,
            "max_tokens": max_tokens,
            "timeout": timeout or DEFAULT_TIMEOUT,
        }
        return
    from hopgym.agents.model.local_server import local_model_string, local_server

    with local_server() as server:
        yield {
            "model": local_model_string(),
            "api_base": server.api_base,
            "api_key": "sk-local",
            "max_tokens": max_tokens or DEFAULT_LOCAL_MAX_TOKENS,
            "timeout": timeout or DEFAULT_LOCAL_TIMEOUT,
            "server_failure": server.failure,
        }


def _checkpoint_endpoint(
    folder: Path, max_tokens: int | None, timeout: float | None, executor: str
) -> Iterator[dict[str, Any]]:
    if executor == "ray":
        raise ConfigError(
            f"--model {folder} is served on this machine only; with --executor ray serve it where every "
            "node can reach it and pass --model and --api-base"
        )
    from hopgym.agents.model.checkpoint_server import checkpoint_model_string, checkpoint_server

    with checkpoint_server(folder) as server:
        yield {
            "model": checkpoint_model_string(folder),
            "api_base": server.api_base,
            "api_key": "sk-local",
            "max_tokens": max_tokens or DEFAULT_LOCAL_MAX_TOKENS,
            "timeout": timeout or DEFAULT_LOCAL_TIMEOUT,
            "server_failure": server.failure,
        }
