"""An eval run folder: the names of its files, and its ``episodes.jsonl`` of typed episode records.

Light on purpose (no env class, model or runner import): the summary, report, rescore, tracking and the viewer
read run folders through it. Each line of ``episodes.jsonl`` is one finished episode, appended and flushed;
it is parsed once into an :class:`EpisodeRecord`, and readers use its fields, not the JSON object.

A run killed mid-write can leave a partial last line; reading for ``--resume`` drops it (and truncates
the file to the last complete line) so the episode is redone once, never lost and never duplicated. The
file is untrusted input (:mod:`hopgym.run_folder`): a malformed record is skipped by
readers and refused by ``--resume``, named ``file:line``.
"""

from __future__ import annotations

import fcntl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from hopgym.envs.outcome import Outcome
from hopgym.errors import ConfigError, ErrorDetail
from hopgym.run_folder import (
    RecordsRead,
    RecordWriter,
    exists,
    json_line,
    open_append,
    parse_records,
    read_json,
    replace_file,
)

RUN_FILE = "run.json"
"""The run's identity (settings a resume must share) and provenance."""
EPISODES_FILE = "episodes.jsonl"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
LOCK_FILE = "run.lock"
"""Held (``flock``) by the run writing the folder; empty."""
RUN_FILES = (RUN_FILE, SUMMARY_JSON, SUMMARY_MD, EPISODES_FILE)
"""The files an eval run writes into its folder (besides the lock)."""

_NONE = type(None)
AGENT_COUNTS = (
    "parse_failures",
    "raw_json_tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "cut_off_replies",
)
"""The agent's counters that summaries add up (each a number in a well-formed record)."""


@dataclass(frozen=True)
class EpisodeRecord:
    """One line of ``episodes.jsonl`` (docs/contracts.md "CLI and outputs"), made by the runner only.

    Generic over envs: what only one benchmark has (ToolHop's protocol, its scenario) is a setting of the
    run (``run.json``'s ``env_kwargs``), not a field here. Keys this version does not know (such as the
    ``protocol`` records of earlier versions hold) are kept in ``extra`` and written back as they were."""

    task_id: str
    index: int = 0
    sample: int = 0
    """Records from before samples have none: 0."""
    seed: int | None = None
    reward: float | None = None
    correct: bool = False
    terminated: bool = False
    truncated: bool = False
    turns: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    """The env's call records of every step (``status``, ``errors``, ...)."""
    parallel_turns: int = 0
    final_answer: Any = None
    gold_answer: Any = None
    hops: int | None = None
    isolation: str | None = None
    metrics: dict[str, Any] | None = None
    """The terminal ``info["metrics"]``; None when the episode did not end. Each number in it is a fraction
    in [0, 1] (docs/contracts.md): a record holding another is malformed."""
    agent: dict[str, Any] | None = None
    """The agent's counters (``AgentStats.as_dict()``); None when no agent was made."""
    latency_ms: float = 0.0
    error: str | None = None
    """Why the episode could not finish, as ``Class: message``, else None."""
    error_detail: ErrorDetail | None = None
    """The same error as data (:class:`hopgym.errors.ErrorDetail`: ``type``, ``module``, ``message``,
    ``fields``); not written when None, and None in records written before it."""
    messages: list[Any] = field(default_factory=list)
    node: str | None = None
    """The Ray node that ran the episode (``--executor ray``); not written when None."""
    server: str | None = None
    """The env server that played the episode to its end (``--env-url``); not written when None."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> Outcome:
        """How the episode ended, by the rule training records and the verifiers adapters share."""
        return Outcome.of_fields(self.to_json())

    @property
    def key(self) -> tuple[str, int]:
        """What identifies the episode in its run: its task and its sample."""
        return self.task_id, self.sample

    def agent_count(self, name: str) -> float:
        """One of the agent's counters (``prompt_tokens``, ``parse_failures`` ...); 0 when not recorded."""
        return (self.agent or {}).get(name, 0)

    def to_json(self) -> dict[str, Any]:
        """The record as its JSON object (``error_detail``, ``node`` and ``server`` only when set, then the
        keys kept in ``extra``)."""
        known = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        for key in ("error_detail", "node", "server"):
            if known[key] is None:
                del known[key]
        return {**known, **self.extra}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> EpisodeRecord:
        """The typed record of a JSON object; a ``ValueError`` says what makes it unusable (a field that
        readers compute with holding another type: a string ``sample``, a number as ``calls`` ...)."""
        if "task_id" not in record:
            raise ValueError("no task_id")
        for key, types in _FIELD_TYPES.items():
            if key in record and not isinstance(record[key], types):
                raise ValueError(f"its {key} is a JSON {type(record[key]).__name__}")
        for call in record.get("calls") or ():
            errors = call.get("errors") if isinstance(call, dict) else None
            if not isinstance(call, dict) or not isinstance(call.get("status", ""), str):
                raise ValueError("a call record that is no object with a string status")
            if not isinstance(errors, (list, _NONE)) or not all(isinstance(e, str) for e in errors or ()):
                raise ValueError("a call record whose errors are not a list of strings")
        for key, value in (record.get("metrics") or {}).items():  # averaged: 1e308 would overflow the sum
            if isinstance(value, (int, float)) and not 0 <= value <= 1:
                raise ValueError(f"its metric {key!r} is {value}, not a fraction in [0, 1]")
        agent = record.get("agent") or {}
        if any(not isinstance(agent.get(key, 0), (int, float)) for key in AGENT_COUNTS):
            raise ValueError("an agent count that is not a number")
        known = {f.name for f in fields(cls)} - {"extra"}

        def given(key: str, default: Any) -> Any:
            value = record.get(key)
            return default if value is None else value

        reward = record.get("reward")
        return cls(
            task_id=str(record["task_id"]),
            index=given("index", 0),
            sample=given("sample", 0),
            seed=record.get("seed"),
            reward=None if reward is None else float(reward),
            correct=bool(record.get("correct")),
            terminated=bool(record.get("terminated")),
            truncated=bool(record.get("truncated")),
            turns=given("turns", 0),
            calls=given("calls", []),
            parallel_turns=given("parallel_turns", 0),
            final_answer=record.get("final_answer"),
            gold_answer=record.get("gold_answer"),
            hops=record.get("hops"),
            isolation=record.get("isolation"),
            metrics=record.get("metrics"),
            agent=record.get("agent"),
            latency_ms=float(given("latency_ms", 0.0)),
            error=record.get("error"),
            error_detail=record.get("error_detail"),
            messages=given("messages", []),
            node=record.get("node"),
            server=record.get("server"),
            extra={key: value for key, value in record.items() if key not in known},
        )


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "task_id": (str, int),
    "index": (int,),
    "sample": (int, _NONE),
    "seed": (int, _NONE),
    "reward": (int, float, _NONE),
    "correct": (bool, _NONE),
    "terminated": (bool, _NONE),
    "truncated": (bool, _NONE),
    "turns": (int, _NONE),
    "parallel_turns": (int, _NONE),
    "hops": (int, _NONE),
    "calls": (list, _NONE),
    "isolation": (str, _NONE),
    "metrics": (dict, _NONE),
    "agent": (dict, _NONE),
    "latency_ms": (int, float, _NONE),
    "messages": (list, _NONE),
    "error": (str, _NONE),
    "error_detail": (dict, _NONE),
    "node": (str, _NONE),
    "server": (str, _NONE),
}
"""The JSON types of each record field (null: not recorded)."""


def read_episode_file(path: Path, repair: bool = False) -> RecordsRead[EpisodeRecord]:
    """The episode records of a run folder's episodes file and the malformed ones skipped; with ``repair``
    (``--resume``) a malformed record is refused instead and a partial last line cut off
    (:func:`hopgym.run_folder.parse_records`)."""
    return parse_records(path, EpisodeRecord.from_json, resume=repair)


def read_episodes(path: Path, repair: bool = False) -> list[EpisodeRecord]:
    """Every well-formed record of an episodes file (each malformed one logged as a warning and skipped);
    with ``repair``, see :func:`read_episode_file`."""
    read = read_episode_file(path, repair)
    read.warn()
    return read.records


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
    path: Path, records: list[EpisodeRecord], keys: set[tuple[str, int]]
) -> list[EpisodeRecord]:
    """``records`` (the file's, as read) without those of the episodes ``keys`` that hold an ``error``,
    written back in their place (:func:`replace_file`: an interrupted rewrite leaves the old file whole,
    nothing is written through a link). Failed episodes outside ``keys`` (a smaller ``--limit``) keep
    their records."""
    kept = [record for record in records if record.error is None or record.key not in keys]
    if len(kept) < len(records):
        replace_file(path, (json_line(record.to_json()) for record in kept))
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
    """Appends episode records one line each, flushed at once: a killed process loses no finished one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = RecordWriter(path)

    def write(self, record: EpisodeRecord) -> None:
        self._lines.write(record.to_json())

    def close(self) -> None:
        self._lines.close()
