"""What every chat env shares: its sandbox, reading actions, picking a task, and recording tool calls.

ToolHop-v0, FamilyTool-v0 and KGTool-v0 differ in their data and scoring, not in how an assistant message
becomes validated, executed and recorded calls; those steps live here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from hopgym.envs.feedback import outcome_of, shown_text, validation_text
from hopgym.envs.spaces import AssistantActionSpace, ChatObservationSpace, action_problem, as_action
from hopgym.envs.validation import CallCheck, ToolValidator, stand_in
from hopgym.errors import ActionError, ConfigError, HopgymError
from hopgym.sandbox.base import CallResult, Sandbox

TaskT = TypeVar("TaskT")
RESET_OPTIONS = ("task_id", "index")


def env_sandbox(sandbox: str | Sandbox, options: Mapping[str, Any] | None) -> tuple[Sandbox, bool]:
    """The sandbox an env uses and whether the env owns it (and must close it)."""
    if isinstance(sandbox, Sandbox):
        if options:
            raise ConfigError("sandbox_options apply only when sandbox is a backend name, not an instance")
        return sandbox, False
    if not isinstance(sandbox, str):
        raise ConfigError(
            f"sandbox must be a backend name or a Sandbox instance, got {type(sandbox).__name__}"
        )
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"sandbox_options must be a dict of options, got {type(options).__name__}")
    from hopgym.sandbox import make_sandbox

    return make_sandbox(sandbox, **dict(options or {})), True


def checked_action(action: Any) -> dict[str, Any] | str:
    """The action as plain data, or :class:`ActionError` saying why it is no action (the same verdict as
    ``action_space.contains``); raised before the episode changes, so the caller may send a valid one."""
    action = as_action(action)
    problem = action_problem(action)
    if problem is not None:
        raise ActionError(f"{problem}; the episode is unchanged, step() again with a valid action")
    return action


def assistant_message(action: dict[str, Any] | str) -> dict[str, Any]:
    """A checked action (see :func:`checked_action`) as an assistant message; a string is a final answer."""
    if isinstance(action, str):
        return {"role": "assistant", "content": action}
    message: dict[str, Any] = {"role": "assistant", "content": action.get("content")}
    calls = action.get("tool_calls") or []
    if calls:
        message["tool_calls"] = list(calls)
    return message


def call_fields(call: Any, fallback_id: str) -> tuple[str, Any, Any]:
    """(id, name, raw arguments) of an OpenAI tool call, or of a flat ``{"name", "arguments"}`` dict."""
    if not isinstance(call, Mapping):
        return fallback_id, None, call
    function = call["function"] if isinstance(call.get("function"), Mapping) else call
    call_id = call.get("id")
    return (
        (call_id if isinstance(call_id, str) and call_id else fallback_id),
        function.get("name"),
        function.get("arguments"),
    )


def select_task(
    tasks: Sequence[TaskT],
    index_of: Mapping[str, int],
    options: Mapping[str, Any] | None,
    rng: np.random.Generator,
) -> TaskT:
    """The task ``reset`` options name (``task_id`` or ``index``), else one drawn with the env's RNG."""
    options = check_reset_options(options)
    if "task_id" in options:
        task_id = str(options["task_id"])
        if task_id not in index_of:
            example = next(iter(index_of), "?")
            raise ConfigError(f"unknown task_id {task_id!r}; ids look like {example!r}")
        return tasks[index_of[task_id]]
    if "index" in options:
        index = options["index"]
        integral = isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_))
        if not integral or not 0 <= index < len(tasks):
            raise ConfigError(f"reset option index must be an integer in [0, {len(tasks)}), got {index!r}")
        return tasks[int(index)]
    return tasks[int(rng.integers(len(tasks)))]


def check_reset_options(options: Any) -> Mapping[str, Any]:
    """``reset`` options as a mapping of known keys: a misspelled key must not pick a random task."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"reset options must be a dict, got {type(options).__name__}")
    unknown = sorted(map(repr, set(options) - set(RESET_OPTIONS)))
    if unknown:
        raise ConfigError(
            f"unknown reset option(s) {', '.join(unknown)}; valid: {', '.join(map(repr, RESET_OPTIONS))}"
        )
    if len(options) > 1:
        raise ConfigError("reset options name a task by 'task_id' or by 'index', not both")
    return options


def call_record(
    call_id: str, name: Any, check: CallCheck, result: CallResult | None, feedback: str
) -> dict[str, Any]:
    """The ``info["calls"]`` record of one call: ``result`` is its sandbox outcome, None if it did not run."""
    if result is not None:
        status, detailed = outcome_of(result)
        errors = [] if status == "ok" else [status]
        latency_ms, truncated = result.latency_ms, result.truncated
    else:
        status, detailed, errors = check.status, validation_text(check.messages), list(check.errors)
        latency_ms, truncated = 0.0, False
    return {
        "id": call_id,
        "name": name if name is None or isinstance(name, str) else stand_in(name),
        "arguments": check.arguments,
        "status": status,
        "errors": errors,
        "feedback": shown_text(status, detailed, feedback),
        "latency_ms": latency_ms,
        "truncated": truncated,
    }


def tool_message(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool`` chat message that shows a call record's feedback to the agent."""
    return {
        "role": "tool",
        "tool_call_id": record["id"],
        "name": str(record["name"]),
        "content": record["feedback"],
    }


class ChatToolEnv(gym.Env[dict[str, Any], Any]):
    """The episode state every chat env keeps: the message history, the tools offered and their validator,
    turn and call counters, and the sandbox it may own. Subclasses add their data and scoring."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    tasks: Sequence[Any]
    """The env's tasks, in the order ``reset(options={"index": i})`` counts them; each env sets it."""

    def __init__(self, max_turns: int) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.max_turns = max_turns
        self.sandbox: Sandbox | None = None
        self._owns_sandbox = False
        self.observation_space = ChatObservationSpace()
        self.action_space = AssistantActionSpace()
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._validator = ToolValidator([])
        self._classified_tools: list[dict[str, Any]] = []
        self._turns = 0
        self._calls_made = 0
        self._done = True
        self._closed = False
        self._sandbox_spec: tuple[str, dict[str, Any]] | None = None
        """The backend name and options of an owned sandbox: a copy of the env makes its own from them."""

    def _use_sandbox(self, sandbox: str | Sandbox, options: Mapping[str, Any] | None) -> Sandbox:
        self.sandbox, self._owns_sandbox = env_sandbox(sandbox, options)
        if self._owns_sandbox:
            self._sandbox_spec = (str(sandbox), dict(options or {}))
        return self.sandbox

    def warm_up(self) -> None:
        """Wait until the env's sandbox holds the workers it keeps ready, so that the first episodes do not
        pay for starting them (a runner calls this before its episodes; nothing to do without a sandbox)."""
        if self.sandbox is not None:
            self.sandbox.wait_until_warm()

    def _begin_reset(self, seed: int | None) -> None:
        """What every ``reset`` does first: refuse a closed env (the same in every env), seed the RNG."""
        if self._closed:
            raise HopgymError("this env was closed; make a new one")
        super().reset(seed=seed)

    def _check_can_step(self) -> None:
        if self._closed:
            raise HopgymError("this env was closed; make a new one")
        if self._done:
            raise HopgymError("step() called before reset() or after the episode ended; call reset()")

    def _start_episode(
        self,
        tools: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        classify_with: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """``classify_with``: the tool schemas calls are validated against, when not the offered ones."""
        self._tools = tools
        self._classified_tools = list(tools if classify_with is None else classify_with)
        self._validator = ToolValidator(self._classified_tools)
        self._messages = messages
        self._turns = 0
        self._calls_made = 0
        self._done = False

    def _observation(self) -> dict[str, Any]:
        # Shallow copies: a kept observation stays as it was returned, and it is plain JSON data.
        return {"messages": self._messages[:], "tools": self._tools[:]}

    def _info(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The step's ``info``: :meth:`_progress_info` plus what the env adds."""
        raise NotImplementedError

    def _turn_ran_tools(
        self, records: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The step result of a turn whose calls ran: no reward yet, truncated once ``max_turns`` is spent."""
        truncated = self._turns >= self.max_turns
        self._done = truncated
        return self._observation(), 0.0, False, truncated, self._info(records)

    def _progress_info(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``info`` keys every env reports after each step."""
        return {"turn": self._turns, "num_calls": self._calls_made, "calls": records}

    def close(self) -> None:
        if self._owns_sandbox and self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = None
        self._closed = True
        self._done = True
        super().close()

    # -- copies (pickle, copy.deepcopy, vector envs) -----------------------------------------------

    _REBUILT: tuple[str, ...] = ("sandbox", "_validator")
    """Attributes a copy rebuilds instead of copying (processes, compiled validators, closures)."""

    def __getstate__(self) -> dict[str, Any]:
        if self.sandbox is not None and not self._owns_sandbox:
            raise TypeError(
                "this env uses a Sandbox instance it was given, which a copy cannot share; make the env "
                "with a backend name (e.g. sandbox='process') to pickle or copy it"
            )
        state = self.__dict__.copy()
        for key in self._REBUILT:
            state[key] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy has its own sandbox, made like the original's; mid-episode it holds the episode's tools."""
        self.__dict__.update(state)
        self._validator = ToolValidator(self._classified_tools)
        if self._sandbox_spec is not None and not self._closed:
            from hopgym.sandbox import make_sandbox

            backend, options = self._sandbox_spec
            self.sandbox = make_sandbox(backend, **options)
        self._restore()

    def _restore(self) -> None:
        """Rebuild what :attr:`_REBUILT` names beyond the sandbox, and reload a running episode's tools."""


def chat_env(env: gym.Env) -> ChatToolEnv:
    """The hopgym env under ``env``'s wrappers, typed, for callers that read its ``tasks`` or ``sandbox``."""
    inner = env.unwrapped
    if not isinstance(inner, ChatToolEnv):
        raise ConfigError(f"{inner} is not one of hopgym's chat envs ({type(inner).__name__})")
    return inner
