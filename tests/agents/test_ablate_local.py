"""The scenario ablation end to end with the embedded local model (SmolLM2-135M) on a real ToolHop task,
then the report over its runs. Kept small (one task, two turns, short replies) for 2-core CI. Its three
arms reach the server three ways (no tools, tools required, tools offered). The feedback ablation's two
arms differ only in the tool results' wording and the frameworks ablation's arms are the three agents, each
run on the local model by tests/agents/test_model_local.py; their Table 5 and Table 11 are checked on scripted
runs (tests/agents/test_ablate_scripted.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from PIL import Image
from test_construct_local import require_local_model

from hopgym.agents.evaluation.ablation import ABLATIONS
from hopgym.agents.evaluation.records import read_episodes
from hopgym.cli import main

pytestmark = pytest.mark.model


def test_ablations_and_report_run_end_to_end_with_the_local_model(tmp_path: Path) -> None:
    require_local_model()
    out = tmp_path / "scenarios"
    code = main([
        "ablate", "scenarios", "--model", "local", "--limit", "1", "--concurrency", "1", "--max-tokens", "64",
        "--env-arg", "max_turns=2", "--out", str(out), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    arms = []
    for arm in ABLATIONS["scenarios"].arms:
        records = read_episodes(out / arm / "episodes.jsonl")
        assert len(records) == 1 and records[0].error is None, records[0].error
        assert records[0].terminated or records[0].truncated
        assert records[0].agent_count("model_turns") >= 1
        arms.append(out / arm)
    table = (out / "ablation.md").read_text()
    assert table.startswith("# Ablation: scenarios") and "| Metric | direct | mandatory | free |" in table
    assert read_episodes(out / "direct" / "episodes.jsonl")[0].calls == []  # no tools offered

    assert main(["report", *map(str, arms), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    for png in re.findall(r"\]\((\w+\.png)\)", text):
        with Image.open(tmp_path / "report" / png) as image:
            assert image.format == "PNG" and image.text["Description"].startswith("x: ")
        with Image.open(tmp_path / "report" / png) as image:
            image.verify()  # the whole file decodes
    assert json.loads((out / "direct" / "run.json").read_text())["env_kwargs"]["max_turns"] == 2
