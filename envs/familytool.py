"""``FamilyTool-v0``: personalised tool use over a family knowledge graph that may change while in use.

One FamilyTool row per episode. The agent sees the user's query (with the golden sub-KG, the bare query,
the whole KG, or the bare query plus KG tools, per ``kg``) and the row's candidate tools. The episode ends
at the first message that calls a candidate tool (or calls nothing; without KG tools, at the first
message): its calls are recorded, not executed, and scored against the gold call (reward = EM);
``info["metrics"]`` holds the paper's metrics (``familytool_metrics``). With ``kg="tools"`` the agent may
first call the generated KG tools, which run in the sandbox against the live graph ``env.unwrapped.kg``
(add or remove triples between or during episodes; the next call sees them).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from hopgym.envs.calls import CallRecord, CallRequest, new_call_record
from hopgym.envs.chat import ChatToolEnv, Score, Step, select_task
from hopgym.envs.familytool_metrics import extraction_metrics, predicted_calls, tool_use_metrics
from hopgym.envs.feedback import FeedbackMode, validation_text
from hopgym.envs.kg_tool_runtime import KGToolRuntime
from hopgym.envs.prompts import FAMILYTOOL
from hopgym.envs.validation import STATUS_ORDER
from hopgym.errors import ConfigError, DataError
from hopgym.options import check_choice
from hopgym.sandbox.base import CallResult, Sandbox
from hopgym.tasks.familytool import (
    EXTRA_INFO_MARKER,
    FamilyToolTask,
    Variant,
    familytool_data_file,
    load_family_kg,
    load_familytool,
)
from hopgym.tasks.kg_extraction import (
    EXTRACTION_MODES,
    ExtractionMode,
    Reading,
    Retriever,
    check_reading,
    extract,
)
from hopgym.tasks.kg_tools import generate_kg_tools

KgMode = Literal["gold", "none", "full", "tools"]
KG_MODES: tuple[KgMode, ...] = get_args(KgMode)

SYSTEM_PROMPT = FAMILYTOOL["system"]
TOOLS_PROMPT = " " + FAMILYTOOL["kg_tools"]


def _load_retriever(retriever: Retriever | str | None) -> Retriever | None:
    """A retriever callable, or one named ``module:function``."""
    if retriever is None or callable(retriever):
        return retriever
    module_name, _, function_name = str(retriever).partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"retriever {retriever!r} is not an importable 'module:function' ({exc})") from exc
    if not callable(function):
        raise ConfigError(f"retriever {retriever!r} is not callable")
    return function


def bare_query(task: FamilyToolTask) -> str:
    """The query with its speaker tag (as in the row) but without the inlined sub-KG."""
    if task.speaker is None:
        return task.query
    return f"<speak>{task.speaker_label}: {task.speaker}</speak> {task.query}"


def full_kg_query(task: FamilyToolTask, triples: list[tuple[str, str, str]]) -> str:
    """The bare query with the whole KG as its extra information (the paper's Appendix A.2 ablation)."""
    listed = ", ".join(f"[{head}, {relation}, {tail}]" for head, relation, tail in triples)
    return f"{bare_query(task)}  {EXTRA_INFO_MARKER} ({listed})."


class FamilyToolEnv(ChatToolEnv):
    """One FamilyTool row per episode; see docs/contracts.md "Environments".

    ``kg``: ``gold`` (the row's text with its golden sub-KG), ``none`` (bare query), ``full`` (the whole
    live KG in the prompt) or ``tools`` (bare query plus KG tools run in ``sandbox``). ``kg_path``: the KG
    file (default ``$HOPGYM_DATA/familytool/familykg-{variant}.txt``). ``reading``: ``official`` metrics
    (default) or ``paper``. An action may carry ``"kg_extraction"``, the raw ``KG.search(...)`` text of a
    KGETool extraction step; it is extracted from the live KG with ``extraction`` (``greedy`` = the
    official code's mode, ``exact``, or ``retrieval`` with ``retriever``: ``f(relation, relations, k)`` or
    ``"module:function"``, and ``top_k``) and scored by the extraction metrics.
    """

    def __init__(
        self,
        variant: Variant = "e",
        kg: KgMode = "gold",
        data_path: str | os.PathLike[str] | None = None,
        kg_path: str | os.PathLike[str] | None = None,
        sandbox: str | Sandbox = "process",
        sandbox_options: Mapping[str, Any] | None = None,
        max_turns: int = 9,
        feedback: FeedbackMode = "detailed",
        reading: Reading = "official",
        extraction: ExtractionMode = "greedy",
        retriever: Retriever | str | None = None,
        top_k: int = 3,
        call_timeout: float | None = None,
    ) -> None:
        super().__init__(max_turns, feedback, call_timeout)
        self.variant = variant
        self.kg_mode = check_choice("kg", kg, KG_MODES)
        self.reading = check_reading(reading)
        self.extraction = check_choice("extraction", extraction, EXTRACTION_MODES)
        self.retriever = _load_retriever(retriever)
        self.top_k = top_k
        self.tasks: list[FamilyToolTask] = load_familytool(variant, data_path)
        self.data_files = (familytool_data_file(variant, data_path).resolve(),)
        """The files the tasks come from (a run records their sha256)."""
        self.kg = load_family_kg(variant, kg_path)
        self._index_of = {task.id: i for i, task in enumerate(self.tasks)}
        self._runtime: KGToolRuntime | None = None
        if kg == "tools":
            self._runtime = KGToolRuntime(self.kg, self._use_sandbox(sandbox, sandbox_options))
        self._task: FamilyToolTask | None = None
        self._candidates: frozenset[str] = frozenset()
        self._kg_extraction: str | None = None

    # -- episode -----------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self._begin_reset(seed)
        task = select_task(self.tasks, self._index_of, options, self.np_random)
        self._task = task
        tools = [doc.openai_schema() for doc in task.candidate_tools]
        self._candidates = frozenset(doc.name for doc in task.candidate_tools)
        system = SYSTEM_PROMPT
        if self._runtime is not None:
            kg_tools = generate_kg_tools(self.kg, "family")
            clash = sorted(self._candidates & {tool.name for tool in kg_tools})
            if clash:
                raise DataError(
                    f"row {task.id}: candidate tools {clash} have the names of generated KG tools"
                )
            self._runtime.load(kg_tools)
            tools += [tool.openai_schema() for tool in kg_tools]
            system += TOOLS_PROMPT
        self._kg_extraction = None
        return self._start_episode(
            tools,
            [{"role": "system", "content": system}, {"role": "user", "content": self._user_text(task)}],
        )

    def _user_text(self, task: FamilyToolTask) -> str:
        if self.kg_mode == "gold":
            return task.user_text
        if self.kg_mode == "full":
            return full_kg_query(task, list(self.kg))
        return bare_query(task)

    def _special_turn(self, action: dict[str, Any] | str) -> Step | None:
        """Notes a KGETool action's ``kg_extraction``; every turn is a standard one."""
        if isinstance(action, Mapping) and action.get("kg_extraction") is not None:
            self._kg_extraction = action["kg_extraction"]
        return None

    def _is_final(self, calls: Sequence[CallRequest]) -> bool:
        # Without KG tools nothing can run, so the first reply is final (one generation, as officially).
        return self._runtime is None or not calls or any(name in self._candidates for _, name, _ in calls)

    def _final_records(self, calls: Sequence[CallRequest]) -> list[CallRecord]:
        """The calls of the final message: validated and recorded, never executed."""
        records = []
        for call_id, name, raw_arguments in calls:
            check = self._validator.check(name, raw_arguments)
            feedback = "" if check.ok else validation_text(check.messages)
            record = new_call_record(
                call_id, name, check.arguments, check.status, list(check.errors), feedback
            )
            record["executed"] = False
            records.append(record)
        return records

    def _run_call(self, call: CallRequest) -> CallRecord:
        """A KG tool call (kg="tools"), run in the sandbox; anything else is refused by validation."""
        record = super()._run_call(call)
        # A refused call has a validation status; one that ran has its outcome's (docs/contracts.md).
        record["executed"] = record["status"] not in STATUS_ORDER
        return record

    def _execute(self, name: str, arguments: dict[str, Any]) -> CallResult:
        assert self._runtime is not None
        return self._runtime.call(name, arguments, timeout=self._call_timeout)

    # -- scoring -----------------------------------------------------------------------------------

    def _score(self, message: Mapping[str, Any]) -> Score:
        """Tool-use metrics of the final message's calls, plus extraction metrics when the episode carried
        a ``kg_extraction``; reward = EM."""
        assert self._task is not None
        gold = self._task.gold_call
        parts = [tool_use_metrics(predicted_calls(message.get("tool_calls", [])), gold, self.reading)]
        if self._kg_extraction is not None:
            parts.append(self._extraction_metrics(self._kg_extraction))
        tool_em = parts[0]["tool_em"]
        return Score(
            reward=tool_em,
            correct=tool_em == 1.0,
            answer={"name": gold.name, "arguments": dict(gold.arguments)},
            metrics={key: value for part in parts for key, value in part.items() if key != "counts"},
            counts={key: value for part in parts for key, value in part["counts"].items()},
        )

    def _extraction_metrics(self, text: str) -> dict[str, Any]:
        assert self._task is not None
        result = extract(
            text, self.kg, self.extraction, reading=self.reading, retriever=self.retriever, top_k=self.top_k
        )
        kg = self.kg
        path_clean = [c.path is not None and all(kg.has_relation(r) for r in c.path) for c in result.calls]
        usable = sum(
            c.path is not None and c.start is not None and kg.has_entity(c.start) for c in result.calls
        )
        return extraction_metrics(self._task, result.text, result.triples, path_clean, usable, self.reading)

    # -- observation and info ----------------------------------------------------------------------

    def _episode_info(self) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "variant": self.variant,
            "kg": self.kg_mode,
            "live_kg": self.kg,
            "hops": self._task.hops,
            "reading": self.reading,
            "candidate_tools": sorted(self._candidates),
        }

    def _tool_choice(self) -> None:
        return None  # the official pipeline sends none

    _REBUILT = (*ChatToolEnv._REBUILT, "_runtime")

    def _restore(self) -> None:
        if self.sandbox is None:
            return
        self._runtime = KGToolRuntime(self.kg, self.sandbox)
        if self._task is not None and not self._done:
            self._runtime.load(generate_kg_tools(self.kg, "family"))

    def close(self) -> None:
        self._runtime = None
        super().close()
