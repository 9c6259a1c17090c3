"""Where a run's numbers come from, recorded in its ``run.json`` under ``provenance``: hopgym's version,
the sha256 of every data file the tasks were read from, the protocol, when it started and finished, and
whether every selected episode has a record. The report reads it to warn before comparing runs on other
data or another protocol, and to mark incomplete runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from hopgym.tasks.toolhop.hub import sha256_of


def hopgym_version() -> str:
    try:
        return version("hopgym")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def start_provenance(env: Any, expected: int, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance of a run starting (or resuming: ``previous``'s start time is kept) over ``env``'s
    data, with ``expected`` episodes selected."""
    files: Sequence[Path] = getattr(env, "data_files", ())
    return {
        "hopgym_version": hopgym_version(),
        "data": {str(path): sha256_of(path) for path in files},
        "protocol": getattr(env, "protocol", None),
        "started": (previous or {}).get("started") or now(),
        "finished": None,
        "episodes_expected": expected,
        "episodes_recorded": None,
        "complete": False,
    }


def finish_provenance(provenance: Mapping[str, Any], recorded: int) -> dict[str, Any]:
    """``provenance`` at the end of a session that left ``recorded`` episode records."""
    expected = provenance.get("episodes_expected")
    return {
        **provenance,
        "finished": now(),
        "episodes_recorded": recorded,
        "complete": expected is not None and recorded >= expected,
    }


def data_digest(provenance: Mapping[str, Any]) -> str | None:
    """One string for the run's data (the sha256s, sorted), comparable across machines and paths."""
    hashes = sorted((provenance.get("data") or {}).values())
    return "+".join(hashes) if hashes else None


def comparison_warnings(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why runs (name → provenance, or {} for a folder that has none) cannot be compared as they are:
    other data, another protocol, unfinished. Empty when they can."""
    warnings = []
    for key, what, read in (("data", "data (sha256)", data_digest), ("protocol", "protocol", None)):
        values = {name: (read(p) if read else p.get(key)) for name, p in runs.items()}
        if len(values) > 1 and len(set(values.values())) > 1:
            shown = ", ".join(f"{name}: {_short(value)}" for name, value in values.items())
            warnings.append(
                f"these runs used different {what}, so their numbers are not comparable ({shown})"
            )
    for name, provenance in runs.items():
        if not provenance:
            warnings.append(f"{name} records no provenance (made before hopgym recorded it)")
        elif not provenance.get("complete"):
            warnings.append(f"{name} is incomplete: {incomplete_note(provenance)}")
    return warnings


def incomplete_note(provenance: Mapping[str, Any]) -> str:
    recorded, expected = provenance.get("episodes_recorded"), provenance.get("episodes_expected")
    if recorded is None:
        return f"it never finished (started {provenance.get('started')}; {expected} episodes selected)"
    return f"{recorded} of {expected} episodes recorded"


def _short(value: Any) -> str:
    if value is None:
        return "unknown"
    return "+".join(part[:12] for part in str(value).split("+"))
