"""``ToolHop-v0``: multi-hop questions answered by calling LLM-generated tools that run in a sandbox."""

from __future__ import annotations

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
from hopgym.envs.codeact import code_of, run_code
from hopgym.envs.feedback import check_feedback_mode
from hopgym.envs.prompts import SCENARIOS, system_prompt
from hopgym.envs.scoring import get_scorer
from hopgym.errors import ConfigError
from hopgym.sandbox.base import Sandbox
from hopgym.tasks.model import Task
from hopgym.tasks.toolhop import load_toolhop


class ToolHopEnv(ChatToolEnv):
    """One ToolHop query per episode; see DESIGN.md "Environments (contract)" for the full contract.

    ``sandbox`` is a backend name (``"process"``, ``"docker"``; options via ``sandbox_options``) or a
    ready :class:`~hopgym.sandbox.base.Sandbox`, which the env then uses but does not close.
    ``call_timeout`` (seconds) bounds each tool call; ``None`` uses the sandbox's default.
    """

    def __init__(
        self,
        data_path: str | os.PathLike[str] | None = None,
        scenario: str = "mandatory",
        feedback: str = "detailed",
        sandbox: str | Sandbox = "process",
        max_turns: int = 9,
        scorer: str = "official",
        sandbox_options: Mapping[str, Any] | None = None,
        call_timeout: float | None = None,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ConfigError(f"unknown scenario {scenario!r}; valid scenarios: {list(SCENARIOS)}")
        self.scenario = scenario
        self.feedback = check_feedback_mode(feedback)
        self.scorer_name = scorer
        self._score = get_scorer(scorer)
        self._call_timeout = call_timeout
        super().__init__(max_turns)
        self.tasks: list[Task] = load_toolhop(data_path)
        self._index_of = {task.id: i for i, task in enumerate(self.tasks)}
        # The direct scenario offers no tools, so it never runs code and starts no sandbox.
        if scenario != "direct":
            self._use_sandbox(sandbox, sandbox_options)
        self._task: Task | None = None
        self._tool_result_seen = False
        self._load_errors: tuple[str, ...] = ()

    # -- episode -----------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self._begin_reset(seed)
        task = select_task(self.tasks, self._index_of, options, self.np_random)
        self._task = task
        self._load_errors = ()
        if self.sandbox is not None:
            loaded = self.sandbox.load(task.tool_sources)
            undefined = [name for name in task.tool_names if name not in loaded.functions]
            self._load_errors = (*loaded.errors, *(f"tool {name!r} is not defined" for name in undefined))
        self._start_episode(
            [] if self.scenario == "direct" else list(task.tools),
            [
                {"role": "system", "content": system_prompt(self.scenario)},
                {"role": "user", "content": task.question},
            ],
        )
        self._tool_result_seen = False
        return self._observation(), self._info([])

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._check_can_step()
        action = checked_action(action)
        code = code_of(action)
        if code is not None and self.sandbox is not None:
            return self._step_code(action, code)
        message = assistant_message(action)
        self._messages.append(message)
        self._turns += 1
        calls = message.get("tool_calls", [])
        if not calls:
            self._done = True
            answer = message["content"] or ""
            correct = self._score(self._task.answer, answer)
            info = self._info([])
            info.update(correct=correct, answer=self._task.answer)
            return self._observation(), float(correct), True, False, info

        records = [self._run_call(call, f"call_{self._turns}_{i}") for i, call in enumerate(calls)]
        return self._turn_ran_tools(records)

    def _restore(self) -> None:
        if self.sandbox is not None and self._task is not None and not self._done:
            self.sandbox.load(self._task.tool_sources)

    def _step_code(
        self, action: Mapping[str, Any], code: str
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """A CodeAct turn (see envs/codeact.py): run the code, record its tool calls, show its output."""
        assert self.sandbox is not None
        self._messages.append({"role": "assistant", "content": action.get("content") or code})
        self._turns += 1
        records, text = run_code(
            self.sandbox, self._validator, code, self.feedback, f"code_{self._turns}", self._call_timeout
        )
        self._calls_made += len(records)
        self._tool_result_seen = self._tool_result_seen or bool(records)
        self._messages.append({"role": "user", "content": text})
        return self._turn_ran_tools(records)

    def _run_call(self, call: Any, fallback_id: str) -> dict[str, Any]:
        call_id, name, raw_arguments = call_fields(call, fallback_id)
        check = self._validator.check(name, raw_arguments)
        result = None
        if check.ok and self.sandbox is not None:
            result = self.sandbox.call(name, check.arguments, timeout=self._call_timeout)
        record = call_record(call_id, name, check, result, self.feedback)
        self._calls_made += 1
        self._tool_result_seen = True
        self._messages.append(tool_message(record))
        return record

    # -- observation and info ----------------------------------------------------------------------

    def _tool_choice(self) -> str:
        if self.scenario == "direct":
            return "none"
        if self.scenario == "mandatory" and not self._tool_result_seen:
            return "required"
        return "auto"

    def _info(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.id,
            "hops": self._task.hops,
            "scenario": self.scenario,
            "feedback": self.feedback,
            "scorer": self.scorer_name,
            "isolation": self.sandbox.isolation if self.sandbox is not None else "none (no tools offered)",
            "tool_choice": self._tool_choice(),
            "duplicate_tools": list(self._task.duplicate_tools),
            "load_errors": list(self._load_errors),
            **self._progress_info(records),
        }
