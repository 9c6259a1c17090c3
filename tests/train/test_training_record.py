"""``training-tasks.json``: the record a training run leaves of the tasks it trained on, and ``hopgym eval``'s
warning when a model so recorded is evaluated on some of them (printed, and in summary.json, summary.md and
run.json, kept by ``hopgym rescore``). The record is untrusted input: a link, a FIFO, an oversized or
malformed file is refused with an error naming it, before any episode runs, and a good record then works.

The eval runs the CLI end to end against a scripted model server whose litellm name, ``openai/scripted``,
is also a folder in the working directory that holds the record: ``--model FOLDER --api-base URL``, a trained
model served elsewhere (vLLM on a GPU machine, say) under its folder's name. Without ``--api-base`` such a
folder is served by hopgym's checkpoint server (tests/agents/test_eval_checkpoint.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from hopgym.agents.evaluation.training_record import (
    TRAINING_RECORD,
    TrainingStage,
    model_stages,
    overlap_warning,
    read_stages,
    record_path,
    write_record,
)
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.cli import main
from hopgym.errors import ConfigError, DataError
from tests.scripted_runs import TASKS, solving_policy
from tests.shared_data import needs_data

pytestmark = needs_data("toolhop/toolhop_subset100.jsonl")


def stage(env: str, *task_ids: str, command: str = "grpo") -> TrainingStage:
    return TrainingStage(command, env, {"split": "train"}, "train", "task-id", tuple(task_ids))


def eval_argv(server: ScriptedModelServer, out: Path) -> list[str]:
    return ["eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk", "--limit", "3",
            "--max-retries", "0", "--no-progress", "--out", str(out)]  # fmt: skip


@pytest.fixture
def model_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``openai/scripted`` as a folder of the working directory (the scripted server's model name)."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / ScriptedModelServer.model
    folder.mkdir(parents=True)
    return folder


def test_an_eval_on_trained_tasks_warns_naming_the_count(model_folder, tmp_path, capsys):
    ids = [task.id for task in TASKS[:3]]
    # Two of the three evaluated tasks were trained on; another env's stage with the third is no overlap.
    write_record(
        model_folder, [stage("FamilyTool-v0", ids[2], command="sft"), stage("hopgym:ToolHop-v0", *ids[:2])]
    )
    with ScriptedModelServer(solving_policy()) as server:
        assert main(eval_argv(server, tmp_path / "run")) == 0
    expected = "2 of the 3 evaluated ToolHop-v0 task(s) are tasks the model was trained on"
    assert f"hopgym: warning: {expected}" in capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["warnings"]) == 1 and summary["warnings"][0].startswith(expected)
    assert f"> **Warning:** {expected}" in (tmp_path / "run" / "summary.md").read_text()
    assert json.loads((tmp_path / "run" / "run.json").read_text())["warnings"] == summary["warnings"]
    assert main(["rescore", str(tmp_path / "run"), "--out", str(tmp_path / "rescored")]) == 0
    assert json.loads((tmp_path / "rescored" / "summary.json").read_text())["warnings"] == summary["warnings"]


def test_an_eval_on_held_out_tasks_has_no_warning(model_folder, tmp_path, capsys):
    write_record(model_folder, [stage("ToolHop-v0", *(task.id for task in TASKS[3:]))])
    with ScriptedModelServer(solving_policy()) as server:
        assert main(eval_argv(server, tmp_path / "run")) == 0
    assert "warning" not in capsys.readouterr().err
    assert "warnings" not in json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "Warning" not in (tmp_path / "run" / "summary.md").read_text()


def _link(path: Path, outside: Path) -> None:
    path.symlink_to(outside)


def _fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)


def _huge(path: Path, outside: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(65 * 2**20)  # sparse: over the 64 MiB cap, no disk used


def _not_json(path: Path, outside: Path) -> None:
    path.write_text('{"format": 1, "stages": [')


def _wrong_types(path: Path, outside: Path) -> None:
    path.write_text(json.dumps({"format": 1, "stages": [{"command": "grpo", "env": 7, "task_ids": "abc"}]}))


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (_link, "is a symbolic link"),
        (_fifo, "is a FIFO"),
        (_huge, "holds 68157440 bytes, over the 67108864"),
        (_not_json, "is not JSON"),
        (_wrong_types, r"stages\[0\]: env, task_ids missing or of the wrong type"),
    ],
)
def test_a_hostile_record_is_refused_before_any_episode_and_a_good_one_then_works(
    model_folder, tmp_path, capsys, plant, message
):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"format": 1, "stages": []}))
    record = model_folder / TRAINING_RECORD
    plant(record, outside)
    with ScriptedModelServer(solving_policy()) as server:
        assert main(eval_argv(server, tmp_path / "run")) == 2
        err = capsys.readouterr().err
        assert "hopgym: error:" in err and str(record) in err
        assert re.search(message, err)
        assert not server.requests and not (tmp_path / "run").exists()  # refused before anything ran
        record.unlink()
        write_record(model_folder, [stage("ToolHop-v0", TASKS[0].id)])
        assert main(eval_argv(server, tmp_path / "run")) == 0
    assert "1 of the 3 evaluated" in capsys.readouterr().err
    assert json.loads(outside.read_text()) == {"format": 1, "stages": []}  # the link's target untouched


def test_a_checkpoint_reads_its_run_folders_record_and_other_models_have_none(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-4").mkdir(parents=True)
    write_record(run, [stage("KGTool-v0", "a", "b")])
    assert record_path(run / "checkpoint-4") == record_path(run) == run / TRAINING_RECORD
    assert model_stages(run / "checkpoint-4") == (stage("KGTool-v0", "a", "b"),)
    assert model_stages("openai/gpt-4o") == () and model_stages(tmp_path / "missing") == ()
    (tmp_path / "file").write_text("x")
    assert model_stages(tmp_path / "file") == ()  # a .gguf file, say: no folder, no record


def test_a_resumed_run_must_name_the_same_tasks(tmp_path):
    stages = [stage("KGTool-v0", "a", "b")]
    write_record(tmp_path, stages)
    write_record(tmp_path, stages)  # a resume of the same run
    before = (tmp_path / TRAINING_RECORD).read_bytes()
    with pytest.raises(ConfigError, match="names other training tasks than this run's"):
        write_record(tmp_path, [stage("KGTool-v0", "a", "c")])
    assert (tmp_path / TRAINING_RECORD).read_bytes() == before
    assert read_stages(tmp_path / TRAINING_RECORD) == tuple(stages)


def test_the_overlap_counts_distinct_evaluated_tasks_of_the_same_env():
    stages = [stage("KGTool-v0", "a", "b"), stage("hopgym:KGTool-v0", "b", "c"), stage("ToolHop-v0", "d")]
    warning = overlap_warning(stages, "hopgym:KGTool-v0", ["a", "c", "d", "e"])
    assert warning is not None and warning.startswith("2 of the 4 evaluated KGTool-v0 task(s)")
    assert overlap_warning(stages, "KGTool-v0", ["d", "e"]) is None
    assert overlap_warning((), "KGTool-v0", ["a"]) is None


@pytest.mark.parametrize(
    "document", [{"stages": []}, {"format": 2, "stages": []}, {"format": 1, "stages": {}}]
)
def test_a_record_of_another_format_is_refused_naming_the_file(tmp_path, document):
    (tmp_path / TRAINING_RECORD).write_text(json.dumps(document))
    with pytest.raises(DataError, match=f"{tmp_path / TRAINING_RECORD}: not a training record"):
        model_stages(tmp_path)


def test_a_link_planted_where_the_record_goes_is_refused_not_written_through(tmp_path):
    target = tmp_path / "startup.sh"
    target.write_text("echo hi\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / TRAINING_RECORD).symlink_to(target)
    with pytest.raises(DataError, match="is a symbolic link"):
        write_record(out, [stage("KGTool-v0", "a")])
    assert target.read_text() == "echo hi\n"
    (out / TRAINING_RECORD).unlink()
    write_record(out, [stage("KGTool-v0", "a")])  # the folder still takes a record
    assert model_stages(out) == (stage("KGTool-v0", "a"),)
