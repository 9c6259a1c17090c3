"""Query-driven tool construction (ToolHop paper, Section 2.2): from a multi-hop query with ordered
(sub-question, sub-answer) pairs, a model writes one tool per sub-question in three stages — creation
of a document, its refinement, and code generation — each checked (agents/construction/checks.py) and
retried with the failure up to a limit. Rows whose every tool passed become rows of a dataset in the
official ToolHop JSON format (plus ``id`` and ``gold_calls``, the verified calls), which ToolHop-v0 loads.

A row stops at its first failed stage: it cannot enter the dataset, so further model calls would be
spent for nothing. The report counts, per stage, the tools that reached it, passed it, and at which
attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hopgym.agents.construction.checks import (
    check_backward_compatible,
    check_document,
    check_execution,
    check_signature,
    parse_json_reply,
    parse_proposed_call,
)
from hopgym.agents.construction.stage_prompts import (
    creation_prompt,
    generation_prompt,
    refinement_prompt,
    retry_prompt,
)
from hopgym.agents.evaluation.records import check_resumable
from hopgym.agents.evaluation.runner import run_to_completion
from hopgym.agents.model.client import ModelClient, Usage
from hopgym.errors import ConfigError, error_text
from hopgym.run_folder import RecordWriter, read_records, write_json
from hopgym.sandbox.base import Sandbox
from hopgym.tasks.toolhop.construction_rows import QueryRow

STAGES = ("creation", "refinement", "generation")
Check = Callable[[str], tuple[Any, list[str]]]
"""From the model's reply text to (the stage's product, failures); empty failures means it passed."""


@dataclass
class StageRecord:
    """How one stage went for one tool: passed or not, after how many attempts, and why each failed."""

    stage: str
    passed: bool = False
    attempts: int = 0
    failures: list[list[str]] = field(default_factory=list)
    """The failures of each failed attempt, in order."""


@dataclass
class ToolRecord:
    question: str
    answer: str
    stages: list[StageRecord] = field(default_factory=list)
    document: dict[str, Any] | None = None
    code: str | None = None
    call: str | None = None

    @property
    def passed(self) -> bool:
        return len(self.stages) == len(STAGES) and all(stage.passed for stage in self.stages)


@dataclass
class RowRecord:
    id: str
    tools: list[ToolRecord] = field(default_factory=list)
    error: str | None = None
    """Why the row could not be processed (a model-server failure), else None."""
    usage: Usage = field(default_factory=Usage)

    def passed(self, row: QueryRow) -> bool:
        return (
            self.error is None and len(self.tools) == len(row.sub_tasks) and all(t.passed for t in self.tools)
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RowRecord:
        """A record as :func:`dataclasses.asdict` wrote it (the rows file of a resumed construction)."""
        tools = [
            ToolRecord(
                **{**tool, "stages": [StageRecord(**stage) for stage in tool["stages"]]},
            )
            for tool in data["tools"]
        ]
        return cls(data["id"], tools, data.get("error"), Usage(**data["usage"]))


class ToolConstructor:
    """Runs the three stages for each hop of a row with one model client and one sandbox."""

    def __init__(self, client: ModelClient, sandbox: Sandbox, max_attempts: int = 3) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts}")
        self.client = client
        self.sandbox = sandbox
        self.max_attempts = max_attempts
        self._checking = asyncio.Lock()
        """Rows run concurrently but share one sandbox: its load-then-call checks take turns (they take
        milliseconds; the model calls in between are what runs at once)."""

    async def _stage(self, name: str, prompt: str, check: Check, usage: Usage) -> tuple[Any, StageRecord]:
        """Ask, check, and on failure ask again in the same conversation with the failures."""
        record = StageRecord(name)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for attempt in range(1, self.max_attempts + 1):
            reply = await self.client.complete(messages)
            usage.add(reply.usage)
            text = reply.message.get("content") or ""
            async with self._checking:
                product, failures = await asyncio.to_thread(check, text)
            record.attempts = attempt
            if not failures:
                record.passed = True
                return product, record
            record.failures.append(failures)
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": retry_prompt("\n".join(f"- {f}" for f in failures))},
            ]
        return None, record

    def _creation_check(self, taken: Sequence[str]) -> Check:
        def check(text: str) -> tuple[Any, list[str]]:
            reply, failures = parse_json_reply(text)
            if reply is None:
                return None, failures
            document = reply.get("tool")
            return document, check_document(document, taken)

        return check

    def _refinement_check(self, original: Mapping[str, Any], taken: Sequence[str]) -> Check:
        def check(text: str) -> tuple[Any, list[str]]:
            reply, failures = parse_json_reply(text)
            if reply is None:
                return None, failures
            refined = reply.get("refined_version")
            failures = check_document(refined, taken)
            if failures or not isinstance(refined, Mapping):  # check_document fails every non-object
                return refined, failures
            return refined, check_backward_compatible(original, refined)

        return check

    def _generation_check(self, document: Mapping[str, Any], answer: str) -> Check:
        def check(text: str) -> tuple[Any, list[str]]:
            reply, failures = parse_json_reply(text)
            if reply is None:
                return None, failures
            code = reply.get("function")
            if not isinstance(code, str) or not code.strip():
                return None, ["'function' must be a string holding the Python source of the function"]
            failures = check_signature(code, document)
            if failures:
                return None, failures
            call, failures = parse_proposed_call(reply.get("call"), code, document)
            if call is None:
                return None, failures
            failures = check_execution(self.sandbox, code, document, call, answer)
            return (code, call.source), failures

        return check

    async def construct_tool(
        self, question: str, answer: str, taken: Sequence[str], usage: Usage
    ) -> ToolRecord:
        """One hop's tool through the three stages, stopping at the first that fails."""
        tool = ToolRecord(question, answer)
        created, record = await self._stage(
            "creation", creation_prompt(question), self._creation_check(taken), usage
        )
        tool.stages.append(record)
        if not record.passed:
            return tool
        refined, record = await self._stage(
            "refinement", refinement_prompt(created), self._refinement_check(created, taken), usage
        )
        tool.stages.append(record)
        if not record.passed:
            return tool
        tool.document = refined
        generated, record = await self._stage(
            "generation",
            generation_prompt(refined, question, answer),
            self._generation_check(refined, answer),
            usage,
        )
        tool.stages.append(record)
        if record.passed:
            tool.code, tool.call = generated
        return tool

    async def construct_row(self, row: QueryRow) -> RowRecord:
        """Every hop's tool in order; the row stops at its first failed tool or at any exception (a
        model-server failure, a sandbox that broke), which is recorded as the row's error."""
        record = RowRecord(row.id)
        try:
            for question, answer in row.sub_tasks:
                taken = [tool.document["name"] for tool in record.tools if tool.document]
                tool = await self.construct_tool(question, answer, taken, record.usage)
                record.tools.append(tool)
                if not tool.passed:
                    break
        except Exception as exc:
            record.error = error_text(exc)
        return record


def dataset_row(row: QueryRow, record: RowRecord) -> dict[str, Any]:
    """A verified row in the official ToolHop format, with ``id`` and the verified ``gold_calls``."""
    return {
        "id": row.id,
        "question": row.question,
        "answer": row.answer,
        "domain": row.domain,
        "sub_task": dict(row.sub_tasks),
        "tools": {tool.question: tool.document for tool in record.tools},
        "functions": [tool.code for tool in record.tools],
        "gold_calls": [tool.call for tool in record.tools],
    }


def stage_statistics(records: Sequence[RowRecord]) -> dict[str, dict[str, Any]]:
    """Per stage: tools that reached it, passed it, the pass rate, and passes by attempt number."""
    statistics = {}
    for stage in STAGES:
        reached = [s for r in records for t in r.tools for s in t.stages if s.stage == stage]
        passed = [s for s in reached if s.passed]
        by_attempt: dict[str, int] = {}
        for s in passed:
            by_attempt[str(s.attempts)] = by_attempt.get(str(s.attempts), 0) + 1
        statistics[stage] = {
            "reached": len(reached),
            "passed": len(passed),
            "pass_rate": len(passed) / len(reached) if reached else None,
            "passed_at_attempt": dict(sorted(by_attempt.items())),
        }
    return statistics


def construction_report(
    rows: Sequence[QueryRow], records: Sequence[RowRecord], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The report: settings, per-stage statistics, row and tool totals, and every tool's stage records."""
    usage = Usage()
    for record in records:
        usage.add(record.usage)
    return {
        "settings": dict(settings),
        "rows": len(rows),
        "rows_passed": sum(record.passed(row) for row, record in zip(rows, records, strict=True)),
        "rows_with_errors": sum(record.error is not None for record in records),
        "tools_needed": sum(len(row.sub_tasks) for row in rows),
        "tools_passed": sum(tool.passed for record in records for tool in record.tools),
        "stages": stage_statistics(records),
        "usage": usage.as_dict(),
        "details": [
            {
                "id": record.id,
                "passed": record.passed(row),
                "error": record.error,
                "tools": [
                    {
                        "question": tool.question,
                        "name": (tool.document or {}).get("name"),
                        "stages": [asdict(stage) for stage in tool.stages],
                    }
                    for tool in record.tools
                ],
            }
            for row, record in zip(rows, records, strict=True)
        ],
    }


def report_markdown(report: Mapping[str, Any]) -> str:
    """The per-stage table and totals of a construction report."""
    lines = ["| Stage | Reached | Passed | Pass rate | Passed at attempt |", "|---|---:|---:|---:|---|"]
    for stage, stats in report["stages"].items():
        rate = "–" if stats["pass_rate"] is None else f"{100 * stats['pass_rate']:.1f}%"
        attempts = ", ".join(f"#{k}: {v}" for k, v in stats["passed_at_attempt"].items()) or "–"
        lines.append(f"| {stage} | {stats['reached']} | {stats['passed']} | {rate} | {attempts} |")
    lines.append("")
    lines.append(
        f"Rows verified: {report['rows_passed']}/{report['rows']} "
        f"(model-server failures: {report['rows_with_errors']}); "
        f"tools verified: {report['tools_passed']}/{report['tools_needed']}."
    )
    return "\n".join(lines)


def construct_dataset(
    rows: Sequence[QueryRow],
    constructor: ToolConstructor,
    out: Path,
    settings: Mapping[str, Any],
    progress: bool = True,
    concurrency: int = 4,
    resume: bool = False,
) -> dict[str, Any]:
    """Construct every row, ``concurrency`` at a time, appending each finished row's record to the rows
    file (:func:`rows_path`) at once; then write the verified rows to ``out`` (a JSON list) and the report
    (:func:`report_path`), and return the report. With ``resume``, rows already in the rows file are
    kept as they are and not redone; a row cut off mid-way by a kill is redone, once."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    finished = _open_rows_file(out, settings, resume)
    pending = [row for row in rows if row.id not in finished]
    writer = RecordWriter(rows_path(out))
    bar = tqdm(
        total=len(rows), initial=len(rows) - len(pending), desc="construct", unit="row", disable=not progress
    )

    async def run_all() -> None:
        slots = asyncio.Semaphore(concurrency)

        async def one(row: QueryRow) -> RowRecord:
            async with slots:
                return await constructor.construct_row(row)

        # Tasks made in the input's order take the slots in that order (as_completed over bare coroutines
        # would start them in a set's order): a run cut short has done the first rows.
        for done in asyncio.as_completed([asyncio.ensure_future(one(row)) for row in pending]):
            record = await done
            writer.write(asdict(record))
            finished[record.id] = record
            bar.update(1)

    try:
        with bar:
            run_to_completion(run_all())
    finally:
        writer.close()
    records = [finished[row.id] for row in rows]
    verified = [
        dataset_row(row, record) for row, record in zip(rows, records, strict=True) if record.passed(row)
    ]
    write_json(out, verified)
    report = construction_report(rows, records, settings)
    write_json(report_path(out), report)
    return report


def _open_rows_file(out: Path, settings: Mapping[str, Any], resume: bool) -> dict[str, RowRecord]:
    """The records of the rows a previous run finished (resume), after checking it had the same settings."""
    identity = out.with_suffix(".run.json")
    check_resumable(out, identity, rows_path(out), settings, resume)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(identity, dict(settings))
    return {
        record["id"]: RowRecord.from_dict(record)
        for record in read_records(rows_path(out), _row_problem, resume=True).records
    }


def _row_problem(record: dict[str, Any]) -> str | None:
    """What makes ``record`` no row record (None: nothing): ``--resume`` refuses its rows file, naming it."""
    try:
        RowRecord.from_dict(record)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"not a row record ({error_text(exc)})"
    return None


def report_path(out: Path) -> Path:
    """Where the construction report of dataset ``out`` is written."""
    return out.with_suffix(".report.json")


def rows_path(out: Path) -> Path:
    """Where the record of each finished row is appended while dataset ``out`` is constructed."""
    return out.with_suffix(".rows.jsonl")
