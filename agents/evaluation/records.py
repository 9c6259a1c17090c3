"""The run folder's ``episodes.jsonl``: one JSON object per finished episode, appended and flushed (the
same for ``hopgym construct``'s finished rows).

A run killed mid-write can leave a partial last line; reading for ``--resume`` drops it (and truncates
the file to the last complete line) so the episode is redone once, never lost and never duplicated. The
file is untrusted input (:mod:`hopgym.agents.evaluation.run_folder`): a malformed record is skipped by
readers and refused by ``--resume``.
"""

from __future__ import annotations

import fcntl
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict

from hopgym.agents.evaluation.run_folder import (
    RecordsRead,
    exists,
    json_bytes,
    open_append,
    read_json,
    read_records,
    replace_file,
)
from hopgym.errors import ConfigError

EPISODES_FILE = "episodes.jsonl"
LOCK_FILE = "run.lock"
"""Held (``flock``) by the run writing the folder; empty."""


class EpisodeRecord(TypedDict):
    """One line of ``episodes.jsonl`` (docs/contracts.md "CLI and outputs"), made by the runner only."""

    task_id: str
    index: int
    sample: int
    seed: int
    reward: float
    correct: bool
    terminated: bool
    truncated: bool
    turns: int
    calls: list[dict[str, Any]]
    """The env's call records of every step."""
    parallel_turns: int
    final_answer: Any
    gold_answer: Any
    hops: Any
    isolation: str | None
    protocol: str | None
    metrics: dict[str, Any] | None
    """The terminal ``info["metrics"]``; None when the episode did not end."""
    agent: dict[str, Any] | None
    latency_ms: float
    error: str | None
    """Why the episode could not finish, as ``Class: message``, else None."""
    messages: list[Any]
    node: NotRequired[str]
    """The Ray node that ran the episode (``--executor ray``)."""


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str, int),
    "index": (int,),
    "sample": (int, type(None)),
    "seed": (int, type(None)),
    "reward": (int, float, type(None)),
    "correct": (bool, type(None)),
    "turns": (int,),
    "parallel_turns": (int, type(None)),
    "hops": (int, type(None)),
    "calls": (list, type(None)),
    "metrics": (dict, type(None)),
    "agent": (dict, type(None)),
    "messages": (list, type(None)),
    "error": (str, type(None)),
    "protocol": (str, type(None)),
}
"""The type of each record field that summaries, reports and the viewer compute with."""
_AGENT_COUNTS = (
    "parse_failures",
    "raw_json_tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "cut_off_replies",
)


def episode_problem(record: dict[str, Any]) -> str | None:
    """What makes ``record`` unusable as an episode record (None: nothing): a field that readers compute
    with holding another type (a string ``sample``, a number as ``calls``, ...)."""
    if "task_id" not in record:
        return "no task_id"
    for key, types in _FIELD_TYPES.items():
        if key in record and not isinstance(record[key], types):
            return f"its {key} is a JSON {type(record[key]).__name__}"
    for call in record.get("calls") or ():
        errors = call.get("errors") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("status", ""), str):
            return "a call record that is no object with a string status"
        if not isinstance(errors, (list, type(None))) or not all(isinstance(e, str) for e in errors or ()):
            return "a call record whose errors are not a list of strings"
    agent = record.get("agent") or {}
    if any(not isinstance(agent.get(key, 0), (int, float)) for key in _AGENT_COUNTS):
        return "an agent count that is not a number"
    return None


def read_episode_file(path: Path, repair: bool = False) -> RecordsRead:
    """The episode records of a run folder's episodes file and the malformed ones skipped; with ``repair``
    (``--resume``) a malformed record is refused instead and a partial last line cut off
    (:func:`hopgym.agents.evaluation.run_folder.read_records`)."""
    return read_records(path, episode_problem, resume=repair)


def read_episodes(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every well-formed record of an episodes file (each malformed one logged as a warning and skipped);
    with ``repair``, see :func:`read_episode_file`."""
    read = read_episode_file(path, repair)
    read.warn()
    return read.records


def record_line(record: Mapping[str, Any]) -> bytes:
    """A record as its line of an episodes file (:func:`json_bytes`: what is written reads back)."""
    return json_bytes(record) + b"\n"


def lock_run_folder(folder: Path) -> IO[bytes]:
    """An exclusive lock on a run folder for as long as the returned file is open: a second run on it (a
    ``--resume`` while the first still runs) is refused instead of writing records beside it."""
    handle = open_append(folder / LOCK_FILE)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"{folder} is being written by another run; wait for it to end or pick another --out"
        ) from None
    return handle


def drop_failed_episodes(
    path: Path, records: list[dict[str, Any]], keys: set[tuple[str, int]]
) -> list[dict[str, Any]]:
    """``records`` (the file's, as read) without those of the episodes ``keys`` that hold an ``error``,
    written back in their place (:func:`replace_file`: an interrupted rewrite leaves the old file whole,
    nothing is written through a link). Failed episodes outside ``keys`` (a smaller ``--limit``) keep
    their records."""
    kept = [record for record in records if record.get("error") is None or episode_key(record) not in keys]
    if len(kept) < len(records):
        replace_file(path, (record_line(record) for record in kept))
    return kept


def check_resumable(
    name: Path, identity_file: Path, progress_file: Path, identity: Mapping[str, Any], resume: bool
) -> None:
    """Refuse to start over the previous run ``name`` (its identity or progress file exists) without
    ``resume``, and to resume one made with other settings; writes nothing."""
    if not (exists(identity_file) or exists(progress_file)):
        return
    if not resume:
        raise ConfigError(f"{name} already holds a run; pass --resume to continue it or pick a new --out")
    previous = read_json(identity_file)
    if previous is not None:
        different = sorted(key for key in identity if previous.get(key) != identity[key])
        if different:
            was = {key: previous.get(key) for key in different}
            now = {key: identity[key] for key in different}
            raise ConfigError(f"cannot resume {name}: it was run with {was}, not {now}")


class EpisodeWriter:
    """Appends records one line each, flushed at once: a killed process loses no finished episode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = open_append(path)

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(record_line(record))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def episode_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """What identifies an episode in a run: its task and its sample (records from before samples: 0)."""
    return str(record["task_id"]), int(record.get("sample") or 0)
