"""What the outside-harness tests (verifiers v1, Inspect) hold their runs to: ``hopgym eval`` on the same
scripted replies (``hopgym serve scripted``), for the same envs and tasks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hopgym.cli import main

ROWS = 3
"""Tasks per env: the first ``ROWS`` of each."""
ENVS: dict[str, dict[str, Any]] = {
    "ToolHop-v0": {},
    "FamilyTool-v0": {},
    "KGTool-v0": {"kg": "family-e", "patterns": "1p,2i", "n": 2, "seed": 0},
}
"""The envs and their ``gym.make`` keyword arguments."""
PAPER_COLUMNS = {
    "ToolHop-v0": (),
    "FamilyTool-v0": ("tool_em", "tool_acc", "value_acc"),
    "KGTool-v0": ("precision", "recall", "f1", "hits@1"),
}
"""Each env's paper columns beyond answer correctness and ToolHop's query columns."""


def hopgym_eval(
    env_id: str,
    model: str,
    api_base: str,
    api_key: str,
    out: Path,
    env_kwargs: Mapping[str, Any] | None = None,
    rows: int = ROWS,
) -> dict[str, dict[str, Any]]:
    """``hopgym eval`` of the first ``rows`` tasks of ``env_id`` (with ``env_kwargs``, by default ``ENVS``'):
    its episode records by task id, read from the run folder ``out``."""
    kwargs = ENVS[env_id] if env_kwargs is None else env_kwargs
    args = ["eval", "--env", env_id, "--model", model, "--api-base", api_base, "--api-key", api_key]
    args += [arg for key, value in kwargs.items() for arg in ("--env-arg", f"{key}={value}")]
    assert main([*args, "--limit", str(rows), "--out", str(out), "--no-progress"]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return {record["task_id"]: record for record in records}
