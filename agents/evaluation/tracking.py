"""Experiment tracking: a finished run folder logged to MLflow or to Weights & Biases.

What is logged is what the folder holds, so a tracker never disagrees with the files: the config
(``run.json``: settings and provenance), one step per episode (``episode/...``: the per-episode value behind
each summary metric, plus reward, errors, latency and tokens), and every number of ``summary.json`` under
its dotted key (``answer_correctness``, ``intervals.answer_correctness.half_width``, ``pass_at_k.2``).

MLflow writes to ``MLFLOW_TRACKING_URI``, else to a local file store ``./mlruns``; W&B runs offline (files
under ``./wandb`` or ``WANDB_DIR``, uploaded later with ``wandb sync``) unless ``WANDB_MODE`` says
otherwise. Both libraries come with the ``tracking`` extra and are imported only here.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.records import (
    EPISODES_FILE,
    RUN_FILE,
    SUMMARY_JSON,
    SUMMARY_MD,
    EpisodeRecord,
    read_episodes,
)
from hopgym.agents.evaluation.summary import episode_values
from hopgym.errors import ConfigError, DataError, TrackingError, error_text
from hopgym.run_folder import read_document, read_json

TRACKERS = ("mlflow", "wandb")
"""Each tracker's name is the module it needs (both in the ``tracking`` extra)."""
PROJECT = "hopgym"
"""The MLflow experiment and the W&B project runs go to unless told otherwise."""
EPISODE_PREFIX = "episode/"
_PLAIN_NAME = re.compile(r"\w+")
MLFLOW_PARAM_LIMIT = 6000
"""MLflow refuses longer parameter values; longer ones (a long task list) are cut."""


@dataclass(frozen=True)
class Tracker:
    """One ``--track`` target: ``name`` (mlflow | wandb) and its ``target`` (MLflow tracking URI or
    W&B project; None: the default)."""

    name: str
    target: str | None = None

    @classmethod
    def parse(cls, spec: str) -> Tracker:
        """``mlflow``, ``mlflow:URI`` (a path is a local file store), ``wandb`` or ``wandb:PROJECT``."""
        name, _, target = spec.partition(":")
        if name not in TRACKERS:
            raise ConfigError(f"--track {spec!r}: unknown tracker {name!r}; valid: {', '.join(TRACKERS)}")
        return cls(name, target or None)

    def check_installed(self) -> None:
        """Import the tracker's library now, so a missing one stops the command before the run."""
        try:
            __import__(self.name)
        except ImportError as exc:
            raise ConfigError(
                f"--track {self.name} needs the {self.name} package: pip install 'hopgym[tracking]'"
            ) from exc


def flat_numbers(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number (bools as 0/1) in nested dicts, under its dotted key; other values are left out."""
    numbers: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            numbers.update(flat_numbers(value, f"{name}."))
        elif isinstance(value, (bool, int, float)):
            numbers[name] = float(value)
    return numbers


def flat_params(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as dotted keys with string values, for trackers whose parameters are flat strings;
    lists, and mappings keyed by other than plain names (provenance's data file paths), stay one JSON
    value."""
    params: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and all(_PLAIN_NAME.fullmatch(str(k)) for k in value):
            params.update(flat_params(value, f"{name}."))
        else:
            params[name] = value if isinstance(value, str) else json.dumps(value)
    return params


def episode_metrics(record: EpisodeRecord) -> dict[str, float]:
    """One episode's logged values, under ``episode/``."""
    values = {
        **episode_values(record),
        "reward": float(record.reward or 0.0),
        "error": float(record.error is not None),
        "latency_ms": record.latency_ms,
        "prompt_tokens": float(record.agent_count("prompt_tokens")),
        "completion_tokens": float(record.agent_count("completion_tokens")),
    }
    return {f"{EPISODE_PREFIX}{key}": value for key, value in values.items()}


@dataclass(frozen=True)
class RunFiles:
    """What a tracker logs of a run folder."""

    name: str
    config: dict[str, Any]
    episodes: list[dict[str, float]]
    """One row per episode, in task order (then sample)."""
    summary: dict[str, float]
    artifacts: dict[str, str]
    """The run folder's files by name, as read: a tracker copies no file by path (no link followed)."""

    @classmethod
    def read(cls, folder: Path) -> RunFiles:
        summary = read_json(folder / SUMMARY_JSON)
        if summary is None:
            raise DataError(f"{folder} has no {SUMMARY_JSON}: only a finished run can be tracked")
        config = read_json(folder / RUN_FILE) or summary.get("run") or {}
        records = sorted(read_episodes(folder / EPISODES_FILE), key=lambda r: (r.index, r.sample))
        numbers = flat_numbers({key: value for key, value in summary.items() if key != "run"})
        texts = {name: read_document(folder / name) for name in (RUN_FILE, SUMMARY_JSON, SUMMARY_MD)}
        artifacts = {name: text.decode(errors="replace") for name, text in texts.items() if text is not None}
        return cls(folder.resolve().name, config, [episode_metrics(r) for r in records], numbers, artifacts)


def log_run(folder: Path, trackers: Sequence[Tracker]) -> list[str]:
    """Log the finished run in ``folder`` to each tracker; returns one line per tracker saying where."""
    if not trackers:
        return []
    files = RunFiles.read(Path(folder))
    loggers: dict[str, Callable[[RunFiles, str | None], str]] = {"mlflow": _log_mlflow, "wandb": _log_wandb}
    lines = []
    for tracker in trackers:
        tracker.check_installed()
        try:
            lines.append(loggers[tracker.name](files, tracker.target))
        except (ConfigError, TrackingError):
            raise
        except Exception as exc:  # the library's own errors: the run folder is complete all the same
            raise TrackingError(
                f"{tracker.name} could not log {folder} ({error_text(exc)}); the run folder is "
                "complete: the same command with --resume logs it without running an episode again"
            ) from exc
    return lines


# ------------------------------------------------------------------------------------------- MLflow

_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")
"""Characters MLflow does not allow in metric and parameter names."""


def mlflow_uri(target: str | None) -> str:
    """The tracking URI: ``target``, else ``MLFLOW_TRACKING_URI``, else a file store ``./mlruns``; a bare
    path becomes a file store. MLflow 3 accepts a file store only when ``MLFLOW_ALLOW_FILE_STORE`` is set,
    which is set here for one that hopgym is told or chooses to use."""
    uri = target or os.environ.get("MLFLOW_TRACKING_URI") or "mlruns"
    if "://" not in uri and not uri.startswith("file:"):
        uri = Path(uri).resolve().as_uri()
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


def _log_mlflow(files: RunFiles, target: str | None) -> str:
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    uri = mlflow_uri(target)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(PROJECT)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(PROJECT)
    run_id = client.create_run(experiment_id, run_name=files.name).info.run_id
    now = int(time.time() * 1000)
    metrics = [
        Metric(_MLFLOW_KEY.sub("_", key), value, now, step)
        for step, row in enumerate(files.episodes)
        for key, value in row.items()
    ]
    metrics += [Metric(_MLFLOW_KEY.sub("_", key), value, now, 0) for key, value in files.summary.items()]
    params = [
        Param(_MLFLOW_KEY.sub("_", key), value[:MLFLOW_PARAM_LIMIT])
        for key, value in flat_params(files.config).items()
    ]
    try:
        for start in range(0, len(metrics), 1000):  # the REST API's batch limits
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        for start in range(0, len(params), 100):
            client.log_batch(run_id, params=params[start : start + 100])
        client.log_batch(run_id, tags=[RunTag("hopgym.episodes", str(len(files.episodes)))])
        for name, text in files.artifacts.items():
            client.log_text(run_id, text, name)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return f"mlflow: run {run_id} (experiment {PROJECT}) in {uri}"


# ----------------------------------------------------------------------------------- Weights & Biases


def _log_wandb(files: RunFiles, target: str | None) -> str:
    import wandb

    mode = os.environ.get("WANDB_MODE") or "offline"
    os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")  # else it suggests Weave, seeing litellm imported
    run = wandb.init(
        project=target or PROJECT,
        name=files.name,
        config=files.config,
        mode=mode,  # type: ignore[arg-type]
        settings=wandb.Settings(console="off", silent=True),
    )
    try:
        for step, row in enumerate(files.episodes):
            run.log(row, step=step)
        run.summary.update(files.summary)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    where = Path(run.dir).parent  # the run's folder (files/ is in it)
    sync = f"; upload with: wandb sync {where}" if mode == "offline" else ""
    return f"wandb: run {run.id} (project {target or PROJECT}, {mode}) in {where}{sync}"
