"""``KGTool-v0``: KG2Tool queries answered by calling tools generated from a knowledge graph's relations.

Each episode is one task (a sampled FOL query): the agent gets the query and the tools its solution needs
plus ``n_distractors`` others, calls them (each call runs in the sandbox against the KG), and answers with
entity names. Scoring is exact set match (see envs/kgtool/scoring.py); ``info`` adds precision, recall,
F1 and hits@1.

The generated KG tools are our own deterministic code, pure functions of their JSON arguments, so unlike
ToolHop's LLM-written tools they cannot carry state from one episode into the next. The sandbox is loaded
once with the whole KG and all its tools (seconds for FB15k-237) and reused by every episode; which tools
an episode offers is enforced on the host, before any call runs. A marker function loaded with the tools
tells a shared sandbox whose KG it holds, so envs over the same KG share one load and any other load is
noticed and redone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hopgym.envs.chat import ChatToolEnv, EpisodeStart, Score
from hopgym.envs.feedback import FeedbackMode
from hopgym.envs.kg_tool_runtime import KGToolRuntime
from hopgym.envs.kgtool.prompts import KGTOOL
from hopgym.envs.kgtool.scoring import score_answer
from hopgym.errors import ConfigError, SandboxError
from hopgym.options import check_choice
from hopgym.sandbox.base import Sandbox
from hopgym.tasks.kg2tool.assembly import (
    KG_NAMES,
    KGName,
    load_kg_source,
    offered_tool_names,
    parse_patterns,
    sample_tasks,
)
from hopgym.tasks.kg2tool.generated_tools import GeneratedTool
from hopgym.tasks.kg2tool.splits import KG_SPLIT_RULES, KGSplitRule, fol_side, train_side_tools
from hopgym.tasks.kg2tool.task_file import KG2ToolTask, read_tasks
from hopgym.tasks.splits import Split

MARKER_FUNCTION = "kgtool_loaded_kg"
DEFAULT_SANDBOX_OPTIONS: Mapping[str, Any] = {"timeout": 60.0, "result_cap": 1_000_000}
"""For a sandbox the env starts: loading FB15k-237 into a worker takes seconds (``timeout`` also bounds
loads), and intermediate entity sets of a few thousand ids exceed the default result cap."""
DEFAULT_CALL_TIMEOUT = 5.0
METRICS = ("precision", "recall", "f1", "hits@1")
"""The per-episode answer metrics in ``info["metrics"]`` (the KG query papers' columns)."""


def _system_prompt(kg_name: str) -> str:
    hint = f" ({KGTOOL['fb15k_237_ids']})"
    return KGTOOL["system"].format(id_hint=hint if kg_name == "fb15k-237" else "")


class KGToolEnv(ChatToolEnv[KG2ToolTask]):
    """One KG2Tool task per episode; see docs/contracts.md "KG2Tool tasks" and "Environments".

    Tasks come from ``data_path`` (a ``hopgym kg2tool sample`` JSONL file) or, without one, are sampled:
    ``n`` per pattern of ``patterns`` with ``seed``. ``kg_path`` is the KG's data folder (default under
    ``$HOPGYM_DATA``). ``sandbox`` is a backend name (options via ``sandbox_options``) or a ready
    :class:`~hopgym.sandbox.base.Sandbox`, used but not closed.
    """

    contract_cases = ({"kg": "family-e", "patterns": "1p,2i", "n": 1, "seed": 0},)
    split_rules = KG_SPLIT_RULES
    paper_metrics = METRICS  # a fact that holds for every kwarg: a class attribute

    def __init__(
        self,
        kg: KGName = "fb15k-237",
        data_path: str | os.PathLike[str] | None = None,
        patterns: str | Sequence[str] = "all",
        n: int = 20,
        seed: int = 0,
        n_distractors: int = 10,
        feedback: FeedbackMode = "detailed",
        sandbox: str | Sandbox = "process",
        max_turns: int = 9,
        sandbox_options: Mapping[str, Any] | None = None,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        kg_path: str | os.PathLike[str] | None = None,
        split: Split | None = None,
        split_by: KGSplitRule | None = None,
    ) -> None:
        check_choice("kg", kg, KG_NAMES)
        self._use_split(split, split_by)
        if not isinstance(n_distractors, int) or n_distractors < 0:
            raise ConfigError(f"n_distractors must be a non-negative integer, got {n_distractors!r}")
        super().__init__(max_turns, feedback, call_timeout)
        self.n_distractors = n_distractors
        self._seed = seed
        self._source_args = (kg, None if kg_path is None else str(kg_path))  # hashable: the source is cached
        self.source = load_kg_source(*self._source_args)
        # The data file, if any, is recorded by a run (its sha256); sampled tasks have none.
        files = [Path(data_path).resolve()] if data_path is not None else []
        self._use_tasks(self._tasks(kg, data_path, patterns, n, seed), files)
        self._tool_schemas = {tool.name: tool.openai_schema() for tool in self.source.tools}
        unknown = sorted({name for task in self.tasks for name in task.tool_names} - set(self._tool_schemas))
        if unknown:
            raise ConfigError(f"the tasks call tools that {kg} does not generate: {unknown[:5]}")
        if isinstance(sandbox, str):
            sandbox_options = {**DEFAULT_SANDBOX_OPTIONS, **dict(sandbox_options or {})}
        self._use_sandbox(sandbox, sandbox_options)

    def _tasks(
        self, kg: str, data_path: Any, patterns: str | Sequence[str], n: int, seed: int
    ) -> list[KG2ToolTask]:
        if data_path is None:
            if not isinstance(n, int) or n < 1:
                raise ConfigError(f"n (tasks sampled per pattern) must be a positive integer, got {n!r}")
            rule, split = check_choice("split_by", self.split_by, KG_SPLIT_RULES), self.split
            keep = None if split is None else lambda fol: fol_side(fol, rule) == split
            return sample_tasks(self.source, parse_patterns(patterns), n, seed, keep=keep)
        tasks = read_tasks(data_path)
        other = sorted({task.kg for task in tasks} - {kg})
        if other:
            raise ConfigError(f"{data_path} holds tasks over {other}, not kg={kg!r}; pass kg={other[0]!r}")
        wanted = set(parse_patterns(patterns))
        kept = [task for task in tasks if task.pattern in wanted]
        if not kept:
            raise ConfigError(f"{data_path} holds no task of the patterns {sorted(wanted)}")
        return kept

    # -- episode -----------------------------------------------------------------------------------

    def _episode_start(self, task: KG2ToolTask) -> EpisodeStart:
        self._ensure_loaded()
        offered = offered_tool_names(task, self._offerable(), self.n_distractors, self._seed)
        return EpisodeStart(
            [self._tool_schemas[name] for name in offered],
            [
                {"role": "system", "content": _system_prompt(self.source.name)},
                {"role": "user", "content": task.query},
            ],
        )

    def _offerable(self) -> Sequence[GeneratedTool]:
        """The tools an episode may offer: a relation split's train side is never offered a held-out
        relation's tool, distractors included."""
        if (self.split, self.split_by) == ("train", "relation"):
            return train_side_tools(self.source.tools)
        return self.source.tools

    def split_side(self, task: KG2ToolTask, rule: str) -> Split | None:
        """The side of ``entity`` (by the query's anchors) or ``relation`` (by the relations it needs) the
        task is on: tasks/kg2tool/splits.py."""
        return fol_side(task.fol, check_choice("split_by", rule, KG_SPLIT_RULES))

    _REBUILT = (*ChatToolEnv._REBUILT, "source")

    def _restore(self) -> None:
        self.source = load_kg_source(*self._source_args)  # cached: the graph is shared, not reloaded
        if self.sandbox is not None and self._task is not None and not self._done:
            self._ensure_loaded()

    def _ensure_loaded(self) -> None:
        """Load the KG and all its tools into the sandbox unless it already holds exactly them."""
        assert self.sandbox is not None
        try:
            probe = self.sandbox.call(MARKER_FUNCTION, {})
        except SandboxError:  # nothing loaded yet
            probe = None
        if probe is not None and probe.status == "ok" and probe.value == self.source.name:
            return
        marker = f"def {MARKER_FUNCTION}():\n    return {self.source.name!r}\n"
        KGToolRuntime(self.source.kg, self.sandbox, watch=False).load(self.source.tools, [marker])
        probe = self.sandbox.call(MARKER_FUNCTION, {})
        if probe.status != "ok" or probe.value != self.source.name:
            raise SandboxError(f"the sandbox did not keep the {self.source.name} tools loaded: {probe.error}")

    def _score(self, message: Mapping[str, Any]) -> Score:
        """Exact set match of the answered names (envs/kgtool/scoring.py); precision, recall, F1 and
        hits@1 are both terminal ``info`` keys and ``metrics``."""
        assert self._task is not None
        score = score_answer(message["content"], self._task.answers, self.source.label, self.source.resolve)
        metrics = dict(zip(METRICS, (score.precision, score.recall, score.f1, score.hits_at_1), strict=True))
        return Score(
            reward=float(score.correct),
            correct=score.correct,
            answer=self.gold_answer(self._task),
            metrics=metrics,
            details={**metrics, "predicted": list(score.predicted), "answer_ids": list(self._task.answers)},
        )

    def gold_answer(self, task: KG2ToolTask) -> Any:
        return sorted({self.source.label(a) for a in task.answers})

    # -- observation and info ----------------------------------------------------------------------

    def _episode_info(self) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "kg": self._task.kg,
            "pattern": self._task.pattern,
            "hops": len(self._task.solution),
        }
