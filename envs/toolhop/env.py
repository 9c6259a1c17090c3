"""``ToolHop-v0``: multi-hop questions answered by calling LLM-generated tools that run in a sandbox."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from hopgym.envs.calls import CallRecord, CallRequest
from hopgym.envs.chat import ChatToolEnv, EpisodeStart, Score, SpecialTurn
from hopgym.envs.feedback import FeedbackMode
from hopgym.envs.toolhop.codeact import code_of, run_code
from hopgym.envs.toolhop.official import OfficialExecutor, official_call_record
from hopgym.envs.toolhop.prompts import SCENARIOS
from hopgym.envs.toolhop.protocols import ProtocolName, get_protocol
from hopgym.envs.toolhop.scoring import episode_correct, get_scorer
from hopgym.messages import ToolMessage
from hopgym.options import check_choice
from hopgym.sandbox.base import LoadResult, Sandbox
from hopgym.tasks.splits import Split
from hopgym.tasks.toolhop.hub import resolve_toolhop_path
from hopgym.tasks.toolhop.loader import load_toolhop
from hopgym.tasks.toolhop.task import Task

Scenario = Literal["direct", "mandatory", "free"]
__all__ = ["Scenario", "ToolHopEnv"]


class ToolHopEnv(ChatToolEnv[Task]):
    """One ToolHop query per episode; see docs/contracts.md "Environments" for the full contract.

    ``sandbox`` is a backend name (``"process"``, ``"docker"``; options via ``sandbox_options``) or a
    ready :class:`~hopgym.sandbox.base.Sandbox`, which the env then uses but does not close.
    ``call_timeout`` (seconds) bounds each tool call; ``None`` uses the protocol's (official: 10 s) or,
    under ``protocol="hopgym"``, the sandbox's default. ``protocol="official"`` reproduces the official
    evaluation code (envs/toolhop/official.py); ``"hopgym"`` is the richer protocol with a system prompt,
    ``tool_choice`` and schema-validated calls (envs/toolhop/protocols.py: the env asks the protocol
    object it holds). A subclass reading other files overrides :meth:`_load_tasks` (ToolTasks-v0).
    """

    _REBUILT = (*ChatToolEnv._REBUILT, "_executor")
    _NO_SANDBOX = "none (no tools offered)"
    contract_cases = ({"scenario": "mandatory"}, {"scenario": "direct"})
    split_rules = ("task-id",)
    rescorable = True

    def __init__(
        self,
        data_path: str | os.PathLike[str] | None = None,
        scenario: Scenario = "mandatory",
        feedback: FeedbackMode = "detailed",
        sandbox: str | Sandbox = "process",
        max_turns: int = 9,
        scorer: str = "official",
        sandbox_options: Mapping[str, Any] | None = None,
        call_timeout: float | None = None,
        protocol: ProtocolName = "official",
        split: Split | None = None,
        split_by: str | None = None,
    ) -> None:
        self.scenario = check_choice("scenario", scenario, SCENARIOS)
        self._protocol = get_protocol(protocol)
        self.protocol = self._protocol.name
        if call_timeout is None:
            call_timeout = self._protocol.call_timeout
        self.scorer_name = scorer
        self._scorer = get_scorer(scorer)
        super().__init__(max_turns, feedback, call_timeout)
        self._use_split(split, split_by)
        self._use_tasks(*self._load_tasks(data_path))
        # The direct scenario offers no tools, so it never runs code and starts no sandbox.
        if scenario != "direct":
            self._use_sandbox(sandbox, sandbox_options)
        self._load_errors: tuple[str, ...] = ()
        self._executor: OfficialExecutor | None = None
        self._stopped: str | None = None

    def _load_tasks(self, data_path: str | os.PathLike[str] | None) -> tuple[list[Task], list[Path]]:
        """The tasks and the files they come from: ToolHop's (official JSON list or subset JSONL)."""
        return load_toolhop(data_path), [resolve_toolhop_path(data_path).resolve()]

    # -- episode -----------------------------------------------------------------------------------

    def _episode_start(self, task: Task) -> EpisodeStart:
        self._load_errors = ()
        self._stopped = None
        if self.sandbox is not None:
            loaded = self._load_tools(task)
            undefined = [name for name in task.tool_names if name not in loaded.functions]
            self._load_errors = (*loaded.errors, *(f"tool {name!r} is not defined" for name in undefined))
        offered, messages = self._protocol.first_turn(task, self.scenario)
        # Calls are classified against one document per tool name (the one whose definition runs) in
        # both protocols, so the Table 4 columns mean the same; the official protocol offers every document.
        direct = self.scenario == "direct"
        return EpisodeStart([] if direct else offered, messages, classify_with=None if direct else task.tools)

    def _load_tools(self, task: Task) -> LoadResult:
        """Load the task's tools into the sandbox (and, under the official protocol, its call runner)."""
        assert self.sandbox is not None
        # The task's call validator is built while the worker loads (its first episode of the task).
        loaded = self.sandbox.load(
            task.tool_sources, task.tool_code or None, meanwhile=lambda: self._validator_for(task.tools)
        )
        self._executor = self._protocol.executor(self.sandbox, task, loaded, self._call_timeout)
        return loaded

    def _restore(self) -> None:
        if self.sandbox is not None and self._task is not None and not self._done:
            self._load_tools(self._task)

    def _special_turn(self, action: dict[str, Any] | str, turn: int) -> SpecialTurn | None:
        """A CodeAct turn (envs/toolhop/codeact.py): run the code, record its tool calls, show its output."""
        code = code_of(action)
        if code is None or self.sandbox is None or isinstance(action, str):
            return None
        records, text = run_code(
            self.sandbox, self._validator, code, self.feedback, f"code_{turn}", self._call_timeout
        )
        assistant = {"role": "assistant", "content": action.get("content") or code}
        return SpecialTurn(messages=(assistant, {"role": "user", "content": text}), records=records)

    def _is_final(self, calls: Sequence[CallRequest]) -> bool:
        return not calls or self._protocol.reply_is_final(self.scenario)

    def _score(self, message: Mapping[str, Any]) -> Score:
        assert self._task is not None
        correct = episode_correct(
            self._scorer, self._protocol.answer_reads_tool_message, self._task.answer, self._messages
        )
        return Score(float(correct), correct, self.gold_answer(self._task))

    def gold_answer(self, task: Task) -> Any:
        return task.answer

    def _run_call(self, call: CallRequest) -> CallRecord:
        """A protocol with its own executor (the official one) runs every call in order, as the official
        script does; a call on which it would stop (a timeout, ``SystemExit`` ...) ends the episode
        unscored, as the official run loses that sample (:meth:`_run_stopped`)."""
        if self._executor is None:
            return super()._run_call(call)
        call_id, name, raw_arguments = call
        check = self._validator.check(name, raw_arguments, empty_is_object=False)
        # Arguments text the check parsed into a dict is what the official json.loads makes of it.
        parsed = (
            check.arguments if isinstance(raw_arguments, str) and isinstance(check.arguments, dict) else None
        )
        outcome = self._executor.run(name, raw_arguments, parsed)
        self._stopped = outcome.stops_run
        return official_call_record(call_id, name, check, outcome, self.feedback)

    def _tool_message(self, record: CallRecord) -> ToolMessage:
        return self._protocol.tool_message(record)

    def _run_stopped(self) -> bool:
        return self._stopped is not None

    # -- observation and info ----------------------------------------------------------------------

    def _tool_choice(self) -> str | None:
        return self._protocol.tool_choice(self.scenario, self._calls_made)

    def _episode_info(self) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "hops": self._task.hops,
            "scenario": self.scenario,
            "scorer": self.scorer_name,
            "protocol": self.protocol,
            "sampling": dict(self._protocol.sampling),
            "stopped": self._stopped,
            "duplicate_tools": list(self._task.duplicate_tools),
            "load_errors": list(self._load_errors),
        }
