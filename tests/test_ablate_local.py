"""The feedback and scenario ablations end to end with the embedded local model (SmolLM2-135M) on a real
ToolHop task, then the report over all their runs. Kept small (one task, two turns, short replies) for
2-core CI. The frameworks ablation's arms are the three agents, each run on the local model by
tests/test_model_local.py; its Table 11 is checked on scripted runs (tests/test_ablate_scripted.py)."""

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
from hopgym.envs.feedback_flips import feedback_flips

pytestmark = pytest.mark.model


def test_ablations_and_report_run_end_to_end_with_the_local_model(tmp_path: Path) -> None:
    require_local_model()
    arms = []
    for name in ("feedback", "scenarios"):
        ablation = ABLATIONS[name]
        out = tmp_path / name
        code = main([
            "ablate", name, "--model", "local", "--limit", "1", "--concurrency", "1", "--max-tokens", "64",
            "--env-arg", "max_turns=2", "--out", str(out), "--no-progress",
        ])  # fmt: skip
        assert code == 0
        for arm in ablation.arms:
            records = read_episodes(out / arm / "episodes.jsonl")
            assert len(records) == 1 and records[0]["error"] is None, records[0]["error"]
            assert records[0]["terminated"] or records[0]["truncated"]
            arms.append(out / arm)
        assert (out / "ablation.md").read_text().startswith(f"# Ablation: {name}")

    # Table 5 from the real runs says what the episodes say.
    flips = feedback_flips(
        read_episodes(tmp_path / "feedback" / "detailed" / "episodes.jsonl"),
        read_episodes(tmp_path / "feedback" / "minimal" / "episodes.jsonl"),
    )
    row = re.search(r"^\| (\d+) \| .* \|$", (tmp_path / "feedback" / "ablation.md").read_text(), re.MULTILINE)
    assert row and int(row.group(1)) == flips.queries

    assert main(["report", *map(str, arms), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    for png in re.findall(r"\]\((\w+\.png)\)", text):
        with Image.open(tmp_path / "report" / png) as image:
            assert image.format == "PNG" and image.text["Description"].startswith("x: ")
        with Image.open(tmp_path / "report" / png) as image:
            image.verify()  # the whole file decodes
    assert (
        json.loads((tmp_path / "feedback" / "detailed" / "run.json").read_text())["env_kwargs"]["max_turns"]
        == 2
    )
