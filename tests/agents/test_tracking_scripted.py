"""``hopgym eval --track mlflow:DIR --track wandb:PROJECT`` on real ToolHop tasks, the real sandbox and a
scripted model server, with the real libraries offline: the MLflow file store and the W&B offline run file
are read back byte by byte (not through the libraries' clients) and must hold run.json, every episode and
every number of summary.json.

Runs when CI=true and fails loudly there if the ``tracking`` extra is not installed; elsewhere the tests
that need the libraries skip, naming what is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.evaluation.tracking import flat_numbers, flat_params
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.cli import main
from tests.scripted_runs import eval_args, read_records, seed_policy

_MISSING = [name for name in ("mlflow", "wandb") if importlib.util.find_spec(name) is None]
needs_tracking = pytest.mark.skipif(
    bool(_MISSING) and os.environ.get("CI") != "true",
    reason=f"the tracking extra is not installed (missing {', '.join(_MISSING)}): "
    "pip install 'hopgym[tracking]'",
)


def mlflow_run(store: Path) -> Path:
    """The one run folder of a file store: ``<experiment id>/<run id>/`` holding ``meta.yaml``."""
    runs = [meta.parent for meta in store.glob("*/*/meta.yaml")]
    assert len(runs) == 1, runs
    return runs[0]


def mlflow_metric(run: Path, key: str) -> list[tuple[int, float]]:
    """(step, value) of every logged value of a metric: lines ``timestamp value step``."""
    lines = (run / "metrics" / key).read_text().splitlines()
    return [(int(step), float(value)) for _, value, step in (line.split() for line in lines)]


def mlflow_metric_keys(run: Path) -> set[str]:
    folder = run / "metrics"
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a ``.wandb`` file (a LevelDB-style log: 7-byte header, then 32 KiB blocks
    of chunks with a 7-byte header: CRC, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    block = 32768
    position, pending, records = 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _key(item: Any) -> str:
    """A history or summary item's key: ``key``, or its ``nested_key`` path joined by dots."""
    return ".".join(item.nested_key) or item.key


def wandb_logged(run_file: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(config, history rows, final summary) as written to an offline run file."""
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
        elif kind == "history":
            history.append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            summary.update({_key(item): json.loads(item.value_json) for item in record.summary.update})
    return config, history, summary


@needs_tracking
def test_mlflow_and_wandb_offline_runs_hold_the_config_every_episode_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not _MISSING, f"CI must install the tracking extra; missing: {_MISSING}"
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # hopgym's default: offline
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out, store = tmp_path / "run", tmp_path / "mlruns"
    options = ["--limit", "3", "--samples", "2", "--model-seed", "0"]
    trackers = ["--track", f"mlflow:{store}", "--track", "wandb:hopgym-test"]
    with ScriptedModelServer(seed_policy()) as server:
        assert main(eval_args(server, out, *options, *trackers)) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    config = json.loads((out / "run.json").read_text())
    records = sorted(read_records(out), key=lambda r: (r["index"], r["sample"]))
    correct = [float(r["correct"]) for r in records]
    assert correct[::2] == [1.0] * 3 and 0.0 in correct  # sample 0 (seed 0) answers right, seed 1 not always
    expected = flat_numbers({key: value for key, value in summary.items() if key != "run"})
    assert expected["answer_correctness"] == sum(correct) / 6 and expected["pass_at_k.2"] == 1.0
    assert (
        expected["intervals.answer_correctness.half_width"]
        == summary["intervals"]["answer_correctness"]["half_width"]
    )

    # MLflow: the file store's files, read directly.
    run = mlflow_run(store)
    assert f"in {store.resolve().as_uri()}" in printed and run.name in printed
    for key, value in expected.items():
        assert mlflow_metric(run, key) == [(0, value)], key
    assert mlflow_metric(run, "episode/answer_correctness") == list(enumerate(correct))
    assert [v for _, v in mlflow_metric(run, "episode/mean_turns")] == [float(r["turns"]) for r in records]
    keys = mlflow_metric_keys(run)
    assert all(key.startswith("episode/") for key in keys - set(expected))
    assert {f"episode/{key}" for key in ("reward", "error", "latency_ms", "prompt_tokens")} <= keys
    params = {path.name: path.read_text() for path in (run / "params").rglob("*") if path.is_file()}
    assert params["env"] == "ToolHop-v0" and params["agent"] == "direct" and params["model"] == server.model
    assert params["env_kwargs.scenario"] == "direct" and params == flat_params(config)
    assert json.loads(params["provenance.data"]) == config["provenance"]["data"]  # {path: sha256}
    artifact = next(run.glob("artifacts/summary.json"))
    assert json.loads(artifact.read_text()) == summary

    # W&B: the offline run file, parsed record by record.
    run_files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1 and "wandb sync" in printed
    logged_config, history, logged_summary = wandb_logged(run_files[0])
    assert {key: logged_config[key] for key in config} == config
    assert [row["_step"] for row in history] == list(range(len(records)))
    assert [row["episode/answer_correctness"] for row in history] == correct
    assert {key: logged_summary[key] for key in expected} == expected


def test_a_missing_tracking_library_stops_the_command_before_the_run_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with ScriptedModelServer(seed_policy()) as server:
        assert main(eval_args(server, tmp_path / "run", "--limit", "1", "--track", "wandb")) == 2
        assert main(eval_args(server, tmp_path / "run", "--limit", "1", "--track", "neptune")) == 2
        assert server.requests == []
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        "hopgym: error: --track wandb needs the wandb package: pip install 'hopgym[tracking]'",
        "hopgym: error: --track 'neptune': unknown tracker 'neptune'; valid: mlflow, wandb",
    ]
    assert not (tmp_path / "run").exists()
