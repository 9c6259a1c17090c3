"""Episode records parsed once into :class:`EpisodeRecord`: a record in the shape hopgym wrote before the
typed records (with ToolHop's ``protocol`` in it) still reads, summarizes, reports and resumes, and what
is read is written back unchanged; a malformed record is named by its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopgym.agents.evaluation.records import (
    EpisodeRecord,
    EpisodeWriter,
    drop_failed_episodes,
    read_episode_file,
)
from hopgym.agents.evaluation.summary import markdown_table, run_title, summarize
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.errors import DataError
from tests.scripted_runs import TASKS, question_of, read_records, run, solving_policy

TODAY = {
    "task_id": "toolhop-001",
    "index": 0,
    "sample": 0,
    "seed": 0,
    "reward": 1.0,
    "correct": True,
    "terminated": True,
    "truncated": False,
    "turns": 2,
    "calls": [{"id": "c1", "name": "f", "arguments": {}, "status": "tool_hallucination", "errors": []}],
    "parallel_turns": 0,
    "final_answer": "Final answer: 7",
    "gold_answer": "7",
    "hops": 3,
    "isolation": "bwrap",
    "protocol": "official",
    "metrics": {"f1": 0.5, "em": None},
    "agent": {"prompt_tokens": 10, "completion_tokens": 4, "model_turns": 2, "gave_up_parsing": False},
    "latency_ms": 12.5,
    "error": None,
    "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Final answer: 7"}],
}
"""One line of episodes.jsonl as hopgym wrote it before the typed records (ToolHop, protocol included)."""


def test_a_record_of_today_reads_typed_and_writes_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(TODAY) + "\n")
    (record,) = read_episode_file(path, repair=True).records
    assert record.key == ("toolhop-001", 0) and record.correct and record.hops == 3
    assert record.agent_count("prompt_tokens") == 10 and record.agent_count("parse_failures") == 0
    assert record.extra == {"protocol": "official"}  # not a generic field: kept, not lost
    assert record.to_json() == TODAY
    drop_failed_episodes(path, [record, EpisodeRecord(task_id="x", error="E: e")], {("x", 0)})
    assert json.loads(path.read_text()) == TODAY


def test_a_record_of_today_summarizes_without_a_protocol_key() -> None:
    record = EpisodeRecord.from_json(TODAY)
    run = {"env": "ToolHop-v0", "env_kwargs": {}, "provenance": {"protocol": "official"}, "agent": "fc"}
    summary = summarize([record], run)
    assert summary["answer_correctness"] == 1.0 and summary["tool_hallucination_query"] == 1.0
    assert summary["prompt_tokens"] == 10 and summary["f1"] == 0.5 and "protocol" not in summary
    assert run_title(summary) == "ToolHop-v0 · official protocol · fc"
    assert "| Protocol |" not in markdown_table({"run": summary})


def test_a_run_folder_of_today_resumes_and_keeps_its_records(tmp_path: Path) -> None:
    """A run written before the typed records (each record holding ``protocol``) resumes: only the new
    task reaches the model, the old line stays as it was, and the summary counts both."""
    out = tmp_path / "run"
    with ScriptedModelServer(solving_policy(correct_every=1)) as server:
        run(server, out, limit=1)
        (old,) = read_records(out)
        assert "protocol" not in old  # this version writes none
        today = {**old, "protocol": "official"}
        line = json.dumps(today) + "\n"
        (out / "episodes.jsonl").write_text(line)
        before = len(server.requests)
        summary = run(server, out, limit=2, resume=True)
        asked = {question_of(request) for request in server.requests[before:]}
    assert asked == {TASKS[1].question}
    assert (out / "episodes.jsonl").read_text().startswith(line)
    assert summary["episodes"] == 2 and summary["answer_correctness"] == 1.0
    assert "# ToolHop-v0 · official protocol · fc" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [("turns", "3", "its turns is a JSON str"), ("latency_ms", [], "its latency_ms is a JSON list")],
)
def test_a_malformed_field_is_named_by_its_line(tmp_path: Path, field: str, value: object, why: str) -> None:
    path = tmp_path / "episodes.jsonl"
    writer = EpisodeWriter(path)
    writer.write(EpisodeRecord.from_json(TODAY))
    writer.close()
    with path.open("a") as handle:
        handle.write(json.dumps({**TODAY, field: value}) + "\n")
    read = read_episode_file(path)
    assert len(read.records) == 1 and read.skipped == [f"{path}:2: {why}"]
    with pytest.raises(DataError, match=rf"episodes\.jsonl:2 is {why}; the file is damaged"):
        read_episode_file(path, repair=True)
