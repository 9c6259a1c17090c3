"""One typed error hierarchy for the whole package, so callers can catch by meaning, and an error as the data
records keep of it."""

from __future__ import annotations

import json
from typing import Any, TypedDict

FIELD_CHARS = 1000
"""Longest JSON text of an error field a record keeps (a field holding a whole response is left out)."""


class ErrorDetail(TypedDict):
    """An exception as records keep it beside its ``Class: message`` text: what a reader can sort and act
    on without parsing the text, as OpenEnv's errors carry fields (``active_sessions``, ``session_id``)."""

    type: str
    """The class name, as the text starts."""
    module: str
    message: str
    fields: dict[str, Any]
    """The exception's public attributes that are JSON data of at most :data:`FIELD_CHARS` characters."""


def error_text(exc: BaseException) -> str:
    """``Class: message``: how records and logs name an error."""
    return f"{type(exc).__name__}: {exc}"


def error_detail(exc: BaseException) -> ErrorDetail:
    """``exc`` as plain JSON data (:class:`ErrorDetail`)."""
    fields = {}
    for name, value in vars(exc).items():
        if name.startswith("_"):
            continue
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            continue
        if len(text) <= FIELD_CHARS:
            fields[name] = value
    kind = type(exc)
    return {"type": kind.__name__, "module": kind.__module__, "message": str(exc), "fields": fields}


def one_line(text: str, limit: int = 500) -> str:
    """``text`` on one line of at most ``limit`` characters: an error's cause in a record or a message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HopgymError(Exception):
    """Base class of every error hopgym raises on purpose."""


class DataError(HopgymError):
    """A dataset file is missing, unreadable or malformed."""


class PromptError(DataError):
    """A prompt file of the package is missing or malformed, or lacks a key or placeholder its code needs."""


class DownloadError(DataError):
    """A dataset could not be fetched from its upstream source."""


class ConfigError(HopgymError, ValueError):
    """An env, agent or CLI option has a value that is not allowed."""


class RequestError(HopgymError, ValueError):
    """A request to one of hopgym's local HTTP servers has a parameter that is not allowed (answered 400)."""


class ActionError(HopgymError, ValueError):
    """An action given to ``step`` is not an assistant message or a final answer; the episode is unchanged."""


class SandboxError(HopgymError):
    """The sandbox could not be started or used."""


class IsolationUnavailableError(SandboxError):
    """The requested isolation level is not available on this machine."""


class DockerUnavailableError(IsolationUnavailableError):
    """The docker backend cannot run: no reachable engine, or a container runtime it does not have."""


class SandboxImageMissingError(DockerUnavailableError):
    """The Docker engine does not hold the sandbox image (build it with ``hopgym sandbox build``)."""


class WorkerTimeoutError(SandboxError):
    """A sandbox worker did not answer within its wall-clock deadline."""


class WorkerCrashedError(SandboxError):
    """A sandbox worker exited, or wrote something that is not a protocol message."""


class WorkerProtocolError(WorkerCrashedError):
    """A sandbox worker broke the protocol: an unparseable, oversized, malformed or unrequested message."""


class ClusterError(HopgymError):
    """The Ray cluster could not be joined, or lost every node that ran episodes."""


class ModelError(HopgymError):
    """The model server failed or returned something unusable."""


class ReplyRefusedError(ModelError):
    """A model server's reply was cut off unparsed: larger than the cap on the bytes read of a reply, or
    compressed. The server gave its answer, so it is not asked again: the episode ends with this error."""


class TrackingError(HopgymError):
    """An experiment tracker (MLflow, Weights & Biases) could not log a run; the run folder is complete."""


class KGError(HopgymError, LookupError):
    """A knowledge-graph lookup or update named an entity, relation or triple the graph does not hold."""


class ContractError(HopgymError, AssertionError):
    """An env breaks a rule of docs/contracts.md (raised by ``hopgym.envs.env_checker.check_chat_env``)."""


class EnvServerError(HopgymError):
    """An env server (``hopgym serve env``) refused a session or answered a request with an error."""
