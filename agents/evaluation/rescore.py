"""``hopgym rescore``: a run's answers judged again from its saved trajectories, with no model call.

Each ended episode's saved messages are scored with another scorer and/or the answer rule of another
protocol (the official rule may read the tool message before the answer; hopgym's reads the answer
alone), exactly as the env scores a live episode (:func:`hopgym.envs.toolhop.scoring.episode_correct`). The
trajectory itself is what was run: rescoring under another protocol changes the verdict rule, not the
prompts the model saw. The result is a new run folder that ``hopgym report`` reads like any other.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.provenance import now
from hopgym.agents.evaluation.records import (
    EPISODES_FILE,
    RUN_FILE,
    EpisodeRecord,
    EpisodeWriter,
    read_episodes,
)
from hopgym.agents.evaluation.runner import write_summary_files
from hopgym.envs.env_options import env_class
from hopgym.envs.toolhop.protocols import get_protocol
from hopgym.envs.toolhop.scoring import episode_correct, get_scorer
from hopgym.errors import ConfigError, DataError
from hopgym.run_folder import exists, read_json, write_json


def _run_identity(folder: Path) -> dict[str, Any]:
    identity = read_json(folder / RUN_FILE)
    if not exists(folder / EPISODES_FILE) or identity is None:
        raise DataError(f"{folder} is not a run folder: it needs {EPISODES_FILE} and {RUN_FILE}")
    # ToolHop's scorers judge the saved messages: the run's env declares that they score it.
    if not env_class(str(identity.get("env")), import_module=False).rescorable:
        raise ConfigError(
            f"{folder} ran {identity.get('env')!r}; rescore knows the scorers of ToolHop-v0 and the envs "
            "built on it (their class attribute rescorable)"
        )
    return identity


def rescored_record(record: EpisodeRecord, scorer: str, protocol: str) -> EpisodeRecord:
    """The record with ``correct`` and ``reward`` judged again; an episode that never ended stays wrong.
    The protocol is the run's setting (``run.json``): a ``protocol`` key an earlier version wrote into the
    record is dropped, not left to contradict it."""
    extra = {key: value for key, value in record.extra.items() if key != "protocol"}
    if not record.terminated or record.gold_answer is None:
        return replace(record, extra=extra)
    reads_tool = get_protocol(protocol).answer_reads_tool_message
    correct = episode_correct(get_scorer(scorer), reads_tool, str(record.gold_answer), record.messages)
    return replace(record, correct=correct, reward=float(correct), extra=extra)


def rescore_run(
    folder: Path, out: Path, scorer: str | None = None, protocol: str | None = None
) -> dict[str, Any]:
    """Write the rescored run into the new folder ``out`` and return its summary. ``scorer`` and
    ``protocol`` default to the run's own."""
    identity = _run_identity(folder)
    env_kwargs = dict(identity.get("env_kwargs") or {})
    scorer = scorer or env_kwargs.get("scorer") or "official"
    get_scorer(scorer)  # an unknown name fails here, naming the valid ones
    protocol = protocol or env_kwargs.get("protocol") or "official"
    get_protocol(protocol)  # an unknown name fails here, naming the valid ones
    if out.exists():
        raise ConfigError(f"{out} already exists; rescore writes a new run folder, pick another --out")
    records = [rescored_record(r, scorer, protocol) for r in read_episodes(folder / EPISODES_FILE)]
    out.mkdir(parents=True)
    writer = EpisodeWriter(out / EPISODES_FILE)
    for record in records:
        writer.write(record)
    writer.close()
    provenance = {
        **(identity.get("provenance") or {}),
        "protocol": protocol,
        "rescored": {
            "from": str(folder),
            "at": now(),
            "scorer": env_kwargs.get("scorer") or "official",
            "protocol": env_kwargs.get("protocol") or "official",
        },
    }
    run = {**identity, "env_kwargs": {**env_kwargs, "scorer": scorer, "protocol": protocol}}
    run["provenance"] = provenance
    write_json(out / RUN_FILE, run)
    return write_summary_files(out, records, {**run, "out": str(out)})
