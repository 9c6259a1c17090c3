"""``ToolTasks-v0``: ToolHop-v0 over your own tasks. Any JSONL or JSON-list file of rows in ToolHop's shape
(row.schema.json) is an env with ToolHop's sandbox, protocols, scenarios, feedback modes and scorers, so
hopgym's agents, runner, viewer and adapters run it unchanged."""

from __future__ import annotations

import os
from pathlib import Path

from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.envs.tooltasks.tasks import read_tool_tasks
from hopgym.options import check_choice
from hopgym.tasks.splits import SPLITS, Split
from hopgym.tasks.toolhop.task import Task

EXAMPLE = Path(__file__).with_name("example.json")
"""The tasks without a ``data_path``: two small worked examples shipped with the package."""


class ToolTasksEnv(ToolHopEnv):
    """One task of ``data_path`` (default: :data:`EXAMPLE`) per episode; every other option is ToolHop-v0's
    (docs/contracts.md "Environments"). A bad row fails the constructor, naming its line and problem.
    Its split rule is ``file``: a row's ``split`` field says its side; a row without one is in neither."""

    split_rules = ("file",)
    runs_task_code = True

    def _load_tasks(self, data_path: str | os.PathLike[str] | None) -> tuple[list[Task], list[Path]]:
        path = Path(data_path) if data_path is not None else EXAMPLE
        return read_tool_tasks(path), [path.resolve()]

    def split_side(self, task: Task, rule: str) -> Split | None:
        check_choice("split_by", rule, self.split_rules)
        side = task.metadata.get("split")
        return side if side in SPLITS else None
