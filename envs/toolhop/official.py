"""ToolHop's official evaluation protocol (``protocol="official"``): what its code sends and shows.

The official script (``code/evaluation_closed.py``; see README "Fidelity") answers a tool call with
``json.dumps(result, ensure_ascii=False)``, or ``an error occured when call NAME: ERROR`` for any exception
(bad JSON arguments included); it refuses nothing before running the tool, runs each call with a 10 s
timeout, and a timeout (or an exception that is not an ``Exception``, e.g. ``SystemExit``) stops the whole
script: that sample gets no record and counts as wrong. This module reproduces each step in order:
parse the arguments, find the tool by the official source lookup, splat the arguments, run the tool in
the sandbox and serialise its result there, so the text is the official text.

Deliberate differences (each measured and tested): the tools run in the sandbox's fresh namespace, so
the official script's module globals (``datetime``, ``json`` ...) do not leak into them, their trailing
example code does not run again on each call, and builtins such as ``print`` are not tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hopgym.envs.calls import CallRecord, CallStatus, new_call_record
from hopgym.envs.feedback import MINIMAL_HINT, is_error_value
from hopgym.envs.validation import CallCheck
from hopgym.sandbox.base import CallResult, Sandbox

OFFICIAL_CALL_TIMEOUT = 10.0
"""``func_set_timeout(10)`` around each official call."""
OFFICIAL_SAMPLING: Mapping[str, Any] = {"temperature": 0.0, "max_tokens": 256}
"""What the official client sends with every request (and no ``tool_choice``)."""
OFFICIAL_MODULE = "__main__"
"""The official script runs as a program, so the tools it defines belong to ``__main__``."""
_STOPS_THE_RUN = frozenset({"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException"})
"""Exceptions the official ``except Exception`` does not catch: the script stops on them."""


def error_text(name: Any, message: str) -> str:
    """The official tool-message text of a failed call (its spelling kept)."""
    return f"an error occured when call {name}: {message}"


def official_source_name(source: str) -> str | None:
    """The name the official code reads from a function's source (``source.split('def')[1]...``);
    None when the source has no ``def``, where the official lookup raises IndexError."""
    pieces = source.split("def", 2)  # the same pieces[1] as split("def"), without splitting the rest
    return pieces[1].split("(", 1)[0].strip() if len(pieces) > 1 else None


@dataclass(frozen=True)
class OfficialOutcome:
    """One call under the official protocol: the text the model sees and what the record needs."""

    text: str
    failed: bool
    """The call raised or returned an error value (what ``feedback="minimal"`` hides)."""
    status: CallStatus = "ok"
    """``ok``, ``tool_error``, ``timeout`` or ``resource_limit``."""
    ran: bool = True
    """False when the call failed before the tool ran (bad JSON, unknown name, non-mapping arguments)."""
    stops_run: str | None = None
    """Why the official script would stop at this call (the episode then ends unscored), else None."""
    latency_ms: float = 0.0
    truncated: bool = False


def _failure(name: Any, message: str, status: CallStatus = "tool_error", **extra: Any) -> OfficialOutcome:
    return OfficialOutcome(error_text(name, message), True, status, **extra)


def _not_run(name: Any, message: str) -> OfficialOutcome:
    return _failure(name, message, ran=False)


def _split_error(error: str | None) -> tuple[str, str]:
    """("ExceptionType", "message") from the sandbox's ``"ExceptionType: message"``."""
    kind, separator, message = (error or "").partition(": ")
    return (kind, message) if separator and kind.isidentifier() else ("", error or "")


def parse_official_arguments(raw: Any) -> tuple[Any, str | None]:
    """``json.loads`` of the raw arguments as the official code does it (a dict is taken as parsed)."""
    if isinstance(raw, Mapping):
        return dict(raw), None
    try:
        return json.loads(raw), None
    except Exception as exc:  # the official message is str() of whatever json.loads raised
        return raw, str(exc)


class OfficialExecutor:
    """Runs one episode's calls the official way over a loaded sandbox."""

    def __init__(
        self, sandbox: Sandbox, functions: Sequence[str], loaded: Sequence[str], timeout: float
    ) -> None:
        self._sandbox = sandbox
        self._timeout = timeout
        names = [official_source_name(source) for source in functions]
        self._lookup_fails = None in names
        self._callable = {name for name in names if name is not None} & set(loaded)

    def run(self, name: Any, raw_arguments: Any, parsed: dict[str, Any] | None = None) -> OfficialOutcome:
        """``parsed``: ``json.loads(raw_arguments)`` when the caller has it already (not parsed twice)."""
        arguments, problem = (parsed, None) if parsed is not None else parse_official_arguments(raw_arguments)
        if problem is not None:
            return _not_run(name, problem)
        if self._lookup_fails:
            return _not_run(name, "list index out of range")
        if not isinstance(name, str) or name not in self._callable:
            return _not_run(name, f"name {evaluated_name(name)!r} is not defined")
        if not isinstance(arguments, dict):
            kind = type(arguments).__name__
            return _not_run(
                name, f"{OFFICIAL_MODULE}.{name}() argument after ** must be a mapping, not {kind}"
            )
        result = self._sandbox.call(name, arguments, timeout=self._timeout, as_json_text=True)
        return _outcome(name, result)


def evaluated_name(name: Any) -> Any:
    """The name the official ``eval(func_name)`` looks up: eval drops leading spaces and tabs."""
    return name.lstrip(" \t") if isinstance(name, str) else name


def _outcome(name: Any, result: CallResult) -> OfficialOutcome:
    timing: dict[str, Any] = {"latency_ms": result.latency_ms, "truncated": result.truncated}
    if result.status == "ok":
        text = str(result.value)
        if result.truncated:
            return OfficialOutcome(text, False, **timing)
        try:
            failed = is_error_value(json.loads(text))
        except (ValueError, RecursionError) as exc:  # the worker's own text; tool code can forge it
            return _failure(name, f"the tool's result is not JSON text ({exc})", **timing)
        return OfficialOutcome(text, failed, "tool_error" if failed else "ok", **timing)
    if result.status == "timeout":
        return _failure(name, result.error or "timeout", "timeout", stops_run="the call timed out", **timing)
    kind, message = _split_error(result.error)
    if kind in _STOPS_THE_RUN:
        return _failure(name, message, stops_run=f"the tool raised {kind}", **timing)
    status: CallStatus = "resource_limit" if result.status == "resource_limit" else "tool_error"
    return _failure(name, message, status, **timing)


def official_call_record(
    call_id: str, name: Any, check: CallCheck, outcome: OfficialOutcome, feedback: str
) -> CallRecord:
    """The ``info["calls"]`` record of an official call: the classification (``check``) only records, the
    outcome's failure is added when the tool ran or nothing else explains it; ``feedback="minimal"``
    shows the fixed hint instead of a failure's text."""
    errors = list(check.errors)
    if outcome.failed and (outcome.ran or not errors):
        errors.append(outcome.status)
    shown = MINIMAL_HINT if outcome.failed and feedback == "minimal" else outcome.text
    status = errors[0] if errors else "ok"
    return new_call_record(
        call_id, name, check.arguments, status, errors, shown, outcome.latency_ms, outcome.truncated
    )
