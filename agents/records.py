"""The run folder's ``episodes.jsonl``: one JSON object per finished episode, appended and flushed.

A run killed mid-write can leave a partial last line; reading for ``--resume`` drops it (and truncates
the file to the last complete line) so the episode is redone once, never lost and never duplicated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from hopgym.errors import DataError

EPISODES_FILE = "episodes.jsonl"


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


class EpisodeWriter:
    """Appends records one line each, flushed at once: a killed process loses no finished episode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(json.dumps(record, ensure_ascii=False, default=repr) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
