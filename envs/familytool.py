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
from collections.abc import Mapping
from typing import Any

from hopgym.envs.chat import (
    ChatToolEnv,
    assistant_message,
    call_fields,
    call_record,
    checked_action,
    select_task,
    tool_message,
)
from hopgym.envs.familytool_metrics import (
    check_reading,
    extraction_metrics,
    predicted_calls,
    tool_use_metrics,
)
from hopgym.envs.feedback import check_feedback_mode, validation_text
from hopgym.envs.kg_tool_runtime import KGToolRuntime
from hopgym.envs.prompts import FAMILYTOOL
from hopgym.errors import ConfigError, DataError
from hopgym.sandbox.base import Sandbox
from hopgym.tasks.familytool import (
    EXTRA_INFO_MARKER,
    FamilyToolTask,
    familytool_data_file,
    load_family_kg,
    load_familytool,
)
from hopgym.tasks.kg_extraction import EXTRACTION_MODES, Retriever, extract
from hopgym.tasks.kg_tools import generate_kg_tools

KG_MODES = ("gold", "none", "full", "tools")

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
        variant: str = "e",
        kg: str = "gold",
        data_path: str | os.PathLike[str] | None = None,
        kg_path: str | os.PathLike[str] | None = None,
        sandbox: str | Sandbox = "process",
        sandbox_options: Mapping[str, Any] | None = None,
        max_turns: int = 9,
        feedback: str = "detailed",
        reading: str = "official",
        extraction: str = "greedy",
        retriever: Retriever | str | None = None,
        top_k: int = 3,
        call_timeout: float | None = None,
    ) -> None:
        if kg not in KG_MODES:
            raise ConfigError(f"kg must be one of {', '.join(KG_MODES)}, got {kg!r}")
        if extraction not in EXTRACTION_MODES:
            raise ConfigError(f"extraction must be one of {', '.join(EXTRACTION_MODES)}, got {extraction!r}")
        super().__init__(max_turns)
        self.variant = variant
        self.kg_mode = kg
        self.feedback = check_feedback_mode(feedback)
        self.reading = check_reading(reading)
        self.extraction = extraction
        self.retriever = _load_retriever(retriever)
        self.top_k = top_k
        self._call_timeout = call_timeout
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
        self._start_episode(
            tools,
            [{"role": "system", "content": system}, {"role": "user", "content": self._user_text(task)}],
        )
        self._kg_extraction = None
        return self._observation(), self._info([])

    def _user_text(self, task: FamilyToolTask) -> str:
        if self.kg_mode == "gold":
            return task.user_text
        if self.kg_mode == "full":
            return full_kg_query(task, list(self.kg))
        return bare_query(task)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._check_can_step()
        action = checked_action(action)
        if isinstance(action, Mapping) and action.get("kg_extraction") is not None:
            self._kg_extraction = action["kg_extraction"]
        message = assistant_message(action)
        self._messages.append(message)
        self._turns += 1
        calls = message.get("tool_calls", [])
        ids = [f"call_{self._turns}_{i}" for i in range(len(calls))]
        # Without KG tools nothing can run, so the first reply is final (one generation, as officially).
        final = self._runtime is None or not calls
        final = final or any(
            call_fields(c, i)[1] in self._candidates for c, i in zip(calls, ids, strict=True)
        )
        if final:
            records = [
                self._record_unexecuted(call, call_id) for call, call_id in zip(calls, ids, strict=True)
            ]
            assert self._task is not None
            self._done = True
            metrics = self._metrics(calls)
            info = self._info(records)
            gold = self._task.gold_call
            info.update(
                correct=metrics["tool_em"] == 1.0,
                answer={"name": gold.name, "arguments": dict(gold.arguments)},
                metrics=metrics,
            )
            return self._observation(), metrics["tool_em"], True, False, info
        records = [self._run_call(call, call_id) for call, call_id in zip(calls, ids, strict=True)]
        return self._turn_ran_tools(records)

    def _record_unexecuted(self, call: Any, call_id: str) -> dict[str, Any]:
        """A call of the final message: validated and recorded, never executed."""
        call_id, name, raw_arguments = call_fields(call, call_id)
        check = self._validator.check(name, raw_arguments)
        self._calls_made += 1
        return {
            "id": call_id,
            "name": name,
            "arguments": check.arguments,
            "status": check.status,
            "errors": list(check.errors),
            "feedback": "" if check.ok else validation_text(check.messages),
            "latency_ms": 0.0,
            "truncated": False,
            "executed": False,
        }

    def _run_call(self, call: Any, fallback_id: str) -> dict[str, Any]:
        """A KG tool call (kg="tools"), run in the sandbox; anything else is rejected by validation."""
        call_id, name, raw_arguments = call_fields(call, fallback_id)
        check = self._validator.check(name, raw_arguments)
        result = None
        if check.ok and self._runtime is not None:
            result = self._runtime.call(name, check.arguments, timeout=self._call_timeout)
        record = {**call_record(call_id, name, check, result, self.feedback), "executed": check.ok}
        self._calls_made += 1
        self._messages.append(tool_message(record))
        return record

    # -- scoring -----------------------------------------------------------------------------------

    def _metrics(self, calls: list[Any]) -> dict[str, Any]:
        assert self._task is not None
        tool = tool_use_metrics(predicted_calls(calls), self._task.gold_call, self.reading)
        if self._kg_extraction is None:
            return tool
        kg = self._extraction_metrics(self._kg_extraction)
        return {**tool, **kg, "counts": {**tool["counts"], **kg["counts"]}}

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

    def _info(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "variant": self.variant,
            "kg": self.kg_mode,
            "live_kg": self.kg,
            "hops": self._task.hops,
            "feedback": self.feedback,
            "reading": self.reading,
            "isolation": self.sandbox.isolation if self.sandbox is not None else "none (no tools run)",
            "tool_choice": None,  # the official pipeline sends none
            "candidate_tools": sorted(self._candidates),
            **self._progress_info(records),
        }

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
