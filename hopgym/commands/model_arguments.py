"""The command-line options that reach a model, shared by ``hopgym eval``, ``hopgym ablate`` and
``hopgym construct``: its endpoint (``--model``, ``--api-base``, ``--api-key``, ``--timeout``), the request
fields, the reply cap and how many conversations run at once."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hopgym.commands.env_arguments import parse_key_values

DEFAULT_CONCURRENCY = 8
MODEL_KINDS = (
    "a folder hopgym wrote (hopgym train sft / grpo), a .gguf file, a hub id (e.g. "
    "HuggingFaceTB/SmolLM2-135M), a litellm provider string (e.g. openai/gpt-4o), "
    "or 'local' (the embedded SmolLM2)"
)


def looks_like_path(model: str) -> bool:
    """Whether ``model`` names a file or folder rather than a hub id or provider string: it starts with
    ``/``, ``.`` or ``~``, ends with ``.gguf``, or its first component is a folder here (``runs/sft`` when
    ``runs/`` exists; ``openai/gpt-4o`` is not)."""
    if model.startswith(("/", ".", "~")) or model.endswith(".gguf"):
        return True
    first, slash, _ = model.partition("/")
    return bool(slash) and Path(first).is_dir()


def model_argument(model: str) -> str:
    """``--model``'s argparse type: a value that looks like a path (:func:`looks_like_path`) must exist, so
    a missing folder fails at once, naming it, instead of after a hub's retries."""
    if looks_like_path(model) and not Path(model).expanduser().exists():
        raise argparse.ArgumentTypeError(f"no such file or folder: {model!r}; a model is {MODEL_KINDS}")
    return model


def model_extra_from(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields beyond temperature and max tokens: ``--model-arg`` plus ``--top-p`` and
    ``--model-seed``."""
    extra = parse_key_values(args.model_arg, "--model-arg")
    for key, value in (("top_p", args.top_p), ("seed", args.model_seed)):
        if value is not None:
            extra[key] = value
    return extra


def max_reply_bytes(args: argparse.Namespace) -> int:
    """``--max-reply-bytes``, else the model client's default."""
    from hopgym.agents.model.client import DEFAULT_MAX_REPLY_BYTES

    return DEFAULT_MAX_REPLY_BYTES if args.max_reply_bytes is None else args.max_reply_bytes


def api_base_from(bases: Sequence[str] | None) -> str | tuple[str, ...] | None:
    """``--api-base`` given once, several times (replicas of one model), or not at all."""
    if not bases:
        return None
    return bases[0] if len(bases) == 1 else tuple(bases)


def model_endpoint(args: argparse.Namespace) -> contextlib.AbstractContextManager[dict[str, Any]]:
    """ModelConfig fields of ``--model`` and its server (agents/model/endpoint.py); ``local`` runs the
    embedded server meanwhile."""
    from hopgym.agents.model.endpoint import model_endpoint as endpoint

    executor = getattr(args, "executor", "local")
    return endpoint(
        args.model, api_base_from(args.api_base), args.api_key, args.max_tokens, args.timeout, executor
    )


def concurrency_of(args: argparse.Namespace, default: int = DEFAULT_CONCURRENCY) -> int:
    """``--concurrency``, else ``default``; for the local model ``LOCAL_CONCURRENCY`` (its server computes
    one request at a time), for a checkpoint folder the checkpoint server's batch (it generates the
    requests that arrive together as one batch)."""
    if args.concurrency is not None:
        return args.concurrency
    if args.model == "local":
        from hopgym.agents.model.local_server import LOCAL_CONCURRENCY

        return LOCAL_CONCURRENCY
    if not getattr(args, "api_base", None) and Path(args.model).is_dir():
        from hopgym.agents.model.checkpoint_entry import MAX_BATCH

        return MAX_BATCH
    return default
