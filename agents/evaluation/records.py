"""The run folder's ``episodes.jsonl``: one JSON object per finished episode, appended and flushed (the
same for ``hopgym construct``'s finished rows).

A run killed mid-write can leave a partial last line; reading for ``--resume`` drops it (and truncates
the file to the last complete line) so the episode is redone once, never lost and never duplicated.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict

from hopgym.errors import ConfigError, DataError

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


def read_episodes(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete record of an episodes file; with ``repair``, a partial last line is cut off."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete_end = data.rfind(b"\n") + 1
    records = []
    for number, line in enumerate(data[:complete_end].splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number} is not a JSON record ({exc.msg}); the file is damaged") from exc
    if repair and complete_end < len(data):
        with path.open("r+b") as handle:
            handle.truncate(complete_end)
    return records


def record_line(record: Mapping[str, Any]) -> str:
    """A record as its line of an episodes file."""
    return json.dumps(record, ensure_ascii=False, default=repr) + "\n"


def lock_run_folder(folder: Path) -> IO[str]:
    """An exclusive lock on a run folder for as long as the returned file is open: a second run on it (a
    ``--resume`` while the first still runs) is refused instead of writing records beside it."""
    handle = (folder / LOCK_FILE).open("a", encoding="utf-8")
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
    written back in their place (a new file renamed over the old: an interrupted rewrite leaves the old
    file whole). Failed episodes outside ``keys`` (a smaller ``--limit``) keep their records."""
    kept = [record for record in records if record.get("error") is None or episode_key(record) not in keys]
    if len(kept) < len(records):
        fresh = path.with_name(f"{path.name}.retry")
        with fresh.open("w", encoding="utf-8") as handle:
            for record in kept:
                handle.write(record_line(record))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(fresh, path)
    return kept


def check_resumable(
    name: Path, identity_file: Path, progress_file: Path, identity: Mapping[str, Any], resume: bool
) -> None:
    """Refuse to start over the previous run ``name`` (its identity or progress file exists) without
    ``resume``, and to resume one made with other settings; writes nothing."""
    if not (identity_file.exists() or progress_file.exists()):
        return
    if not resume:
        raise ConfigError(f"{name} already holds a run; pass --resume to continue it or pick a new --out")
    if identity_file.exists():
        previous = json.loads(identity_file.read_text())
        different = sorted(key for key in identity if previous.get(key) != identity[key])
        if different:
            was = {key: previous.get(key) for key in different}
            now = {key: identity[key] for key in different}
            raise ConfigError(f"cannot resume {name}: it was run with {was}, not {now}")


class EpisodeWriter:
    """Appends records one line each, flushed at once: a killed process loses no finished episode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(record_line(record))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def episode_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """What identifies an episode in a run: its task and its sample (records from before samples: 0)."""
    return str(record["task_id"]), int(record.get("sample") or 0)
