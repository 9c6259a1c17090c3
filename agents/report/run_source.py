"""The run viewer's run reading: one run folder read again when its episodes file changes, and the outline
of each episode that the page's list shows.

Run folders are read with the report's reader and read again when ``episodes.jsonl`` changes, so a run
still in progress can be watched; a malformed record is skipped and named on the page, and a run that
cannot be read is shown as such beside the others.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.provenance import incomplete_note
from hopgym.agents.evaluation.records import EPISODES_FILE, RUN_FILES, EpisodeRecord
from hopgym.agents.evaluation.summary import run_title
from hopgym.agents.report.markdown import Run, load_run
from hopgym.errors import HopgymError, error_text, one_line
from hopgym.run_folder import open_in_folder

OUTLINE_TEXT_LIMIT = 200


def outcome(record: EpisodeRecord) -> str:
    """``errored`` (the episode ended in an exception), ``correct`` or ``wrong``."""
    if record.error is not None:
        return "errored"
    return "correct" if record.correct else "wrong"


def error_types(record: EpisodeRecord) -> list[str]:
    """What went wrong in an episode: its calls' statuses and error types other than ``ok``, and the
    exception class that ended it (the runner records errors as ``"Class: message"``)."""
    kinds = {
        kind
        for call in record.calls
        for kind in (call.get("status", "ok"), *(call.get("errors") or ()))
        if kind and kind != "ok"
    }
    if record.error is not None:
        kinds.add(record.error.partition(":")[0])
    return sorted(map(str, kinds))


def _short(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= OUTLINE_TEXT_LIMIT else text[: OUTLINE_TEXT_LIMIT - 1] + "…"


def episode_outline(record: EpisodeRecord) -> dict[str, Any]:
    """One row of the episode list: what the filters and the table need, not the transcript."""
    return {
        "task_id": record.task_id,
        "sample": record.sample,
        "outcome": outcome(record),
        "error_types": error_types(record),
        "hops": record.hops,
        "turns": record.turns,
        "calls": len(record.calls),
        "final_answer": _short(record.final_answer),
        "gold_answer": _short(record.gold_answer),
    }


class RunSource:
    """One run folder, read again when its episodes file changes (a run in progress can be watched)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder.resolve()
        self.name = name
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._run: Run | None = None
        self.run()  # a folder that is not a run fails now, not on the first page load

    def run(self) -> Run:
        """The run as read last, read again first if its episodes file has changed since."""
        try:
            stat = os.lstat(self.folder / EPISODES_FILE)
        except FileNotFoundError:
            stat = None
        stamp = (stat.st_mtime_ns, stat.st_size) if stat else None
        with self._lock:
            if self._run is None or stamp != self._stamp:
                self._run = load_run(self.folder, self.name)
                self._stamp = stamp
            return self._run

    def overview(self) -> dict[str, Any]:
        """The run's name, settings line, headline numbers, the outline of every episode and the malformed
        records skipped; for a run that cannot be read (its folder changed since it was first read), its
        name and why, so the other runs are still served."""
        try:
            run = self.run()
        except Exception as exc:
            why = one_line(str(exc) if isinstance(exc, HopgymError) else error_text(exc))
            return {
                "name": self.name,
                "folder": str(self.folder),
                "title": self.name,
                "error": why,
                "files": [],
                "skipped": [],
                "outlines": [],
            }
        summary = run.summary
        provenance = run.provenance
        return {
            "name": self.name,
            "folder": str(self.folder),
            "title": run_title(summary),
            "answer_correctness": summary.get("answer_correctness"),
            "episodes": summary.get("episodes"),
            "errors": summary.get("errors"),
            "incomplete": None
            if not provenance or provenance.get("complete")
            else incomplete_note(provenance),
            "files": [name for name in RUN_FILES if (self.folder / name).is_file()],
            "skipped": run.skipped,
            "outlines": [episode_outline(record) for record in run.records],
        }

    def episode(self, task_id: str, sample: int) -> EpisodeRecord | None:
        """The whole record of the episode of ``task_id``'s ``sample``, None if the run has none."""
        return next((record for record in self.run().records if record.key == (task_id, sample)), None)

    def file(self, relative: str) -> int | None:
        """A descriptor of the regular file at ``relative`` inside this run folder (the caller closes it);
        None for anything else: a missing file, ``..``, an absolute path, a link on the way (never
        followed), a FIFO or device."""
        try:
            return open_in_folder(self.folder, relative)
        except (OSError, HopgymError):
            return None
