"""What every chat env shares: its sandbox, reading actions, picking a task, and recording tool calls.

ToolHop-v0, FamilyTool-v0 and KGTool-v0 differ in their data and scoring, not in how an assistant message
becomes validated, executed and recorded calls; those steps live here once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar, final

import gymnasium as gym
import numpy as np

from hopgym.envs.calls import CallRecord, CallRequest, call_fields, tool_message
from hopgym.envs.feedback import FeedbackMode, call_record, check_feedback_mode
from hopgym.envs.spaces import AssistantActionSpace, ChatObservationSpace, action_problem, as_action
from hopgym.envs.splits import check_split, split_tasks
from hopgym.envs.validation import ToolValidator
from hopgym.errors import ActionError, ConfigError, DataError, HopgymError
from hopgym.messages import ToolMessage
from hopgym.model_text import valid_unicode
from hopgym.options import check_choice
from hopgym.sandbox.base import CallResult, Sandbox
from hopgym.tasks.splits import Split, key_side


class Identified(Protocol):
    """A task: whatever an env's tasks are, each has an id (``reset(options={"task_id": ...})``)."""

    @property
    def id(self) -> str: ...


TaskT = TypeVar("TaskT", bound=Identified)
RESET_OPTIONS = ("task_id", "index")
STANDARD_TURN = "standard"
"""The first-turn kind of an env whose first turn is a standard one: an assistant message the loop runs."""


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
    ``action_space.contains``); raised before the episode changes, so the caller may send a valid one.
    Its text is made valid Unicode (a lone surrogate becomes U+FFFD), so whatever a model wrote can be
    parsed, run and recorded."""
    action = valid_unicode(as_action(action))
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


Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]
"""What ``step`` returns: observation, reward, terminated, truncated, info."""


@dataclass(frozen=True)
class Score:
    """How an ended episode scored, in every env: the reward, whether the answer was correct, the gold
    answer, the env's per-episode ``metrics`` (fractions; ``None`` = not applicable), which run summaries
    average, and integer ``counts``, which dataset readings sum instead (FamilyTool's paper reading).
    ``details`` are further terminal ``info`` keys an env documents (KGTool's ``precision`` ...)."""

    reward: float
    correct: bool
    answer: Any
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        """The terminal ``info`` keys of every env: ``correct``, ``answer``, ``metrics`` (``{}`` when the
        env has none; the counts, if any, under ``metrics["counts"]``) and the env's details."""
        counts = {"counts": dict(self.counts)} if self.counts else {}
        return {
            "correct": self.correct,
            "answer": self.answer,
            "metrics": {**self.metrics, **counts},
            **self.details,
        }


@dataclass(frozen=True)
class EpisodeStart:
    """What an episode starts with (:meth:`ChatToolEnv._episode_start`): the tool schemas offered, the first
    messages, and the schemas calls are validated against when not the offered ones (``classify_with``)."""

    tools: Sequence[Mapping[str, Any]]
    messages: Sequence[Mapping[str, Any]]
    classify_with: Sequence[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class SpecialTurn:
    """What a special turn (:meth:`ChatToolEnv._special_turn`) adds to the episode: ``messages`` appended
    in order, earlier messages ``replaced`` by their index, and the ``records`` of the calls it ran. The
    loop keeps the books: it counts the turn and the calls and truncates once ``max_turns`` is spent."""

    messages: Sequence[Mapping[str, Any]] = ()
    replaced: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    records: Sequence[CallRecord] = ()


class ChatToolEnv(gym.Env[dict[str, Any], Any], ABC, Generic[TaskT]):
    """The episode loop every chat env shares; a subclass adds its data, its prompts and its scoring.

    Set these in ALL subclasses (``__init__``, after ``super().__init__(max_turns, feedback, call_timeout)``):

    - :attr:`tasks`, :attr:`_index_of` and :attr:`data_files`, through :meth:`_use_tasks` (after
      :meth:`_use_split` with the env's ``split`` and ``split_by`` options);
    - the sandbox, through :meth:`_use_sandbox`, unless the env runs no tools.

    and declare :attr:`split_rules`, overriding :meth:`split_side` for a rule other than ``task-id``.

    and implement these (abstract):

    - :meth:`_episode_start`: the tools and first messages of an episode on a task;
    - :meth:`_score`: how the message that ended the episode scored;
    - :meth:`_episode_info`: the env's own ``info`` keys (``task_id``, ``hops`` and what it documents).

    The other hooks have documented defaults an env may override: :meth:`_special_turn` (none),
    :meth:`_is_final` (a message without calls), :meth:`_final_records` (none), :meth:`_run_call` (validate,
    then :meth:`_execute` in the sandbox), :meth:`_tool_message`, :meth:`_run_stopped` (never),
    :meth:`_tool_choice` (``"auto"``), :meth:`_restore` (nothing) with :attr:`_REBUILT`.

    ``reset`` and ``step`` are final: ``reset`` picks the task (:func:`select_task`) and starts the episode
    from :meth:`_episode_start`; ``step`` checks the action, runs a special turn if the env has one, else
    appends the assistant message, counts the turn, and then either ends the episode (:meth:`_is_final`;
    scored by :meth:`_score`; the ending message's calls recorded by :meth:`_final_records`) or runs each
    call (:meth:`_run_call`), records it, shows it as a ``tool`` message (:meth:`_tool_message`), stops
    truncated when :meth:`_run_stopped`, and truncates once ``max_turns`` is spent. ``info`` is
    :meth:`_episode_info` plus the keys every env reports. The loop alone edits the messages, the turn
    and call counts.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    tasks: Sequence[TaskT]
    """The env's tasks, in the order ``reset(options={"index": i})`` counts them; each env sets it."""
    _index_of: Mapping[str, int]
    """Each task's id to its index in :attr:`tasks`; each env sets it."""
    data_files: tuple[Path, ...]
    """The files the tasks come from (a run records their sha256); each env sets it, ``()`` if none."""
    _task: TaskT | None
    """The task of the current (or last) episode; None before the first ``reset``."""
    _NO_SANDBOX = "none (no tools run)"
    """``info["isolation"]`` when the env runs no tools."""
    contract_cases: ClassVar[tuple[Mapping[str, Any], ...]] = ({},)
    """Keyword sets the registry-wide contract test (tests/envs/test_env_contracts.py) makes the env with,
    each small and fast on the shared data; ``{}``: the env's defaults."""
    split_rules: ClassVar[tuple[str, ...]] = ()
    """The rules by which the env divides its tasks into ``train`` and ``heldout`` (its ``split_by``
    values, the default first; docs/contracts.md "Splits"), so a claimed gain can be a held-out gain."""
    split: Split | None = None
    """The side of :attr:`split_by` the env's tasks come from; None: every task."""
    split_by: str | None = None
    rescorable: ClassVar[bool] = False
    """Whether ToolHop's answer scorers and protocols judge its episodes from the saved messages, so that
    ``hopgym rescore`` can judge a run of it again (ToolHop-v0 and the envs built on it)."""
    runs_task_code: ClassVar[bool] = False
    """Whether the tool code its calls run comes with the tasks a user brings (ToolTasks-v0's files), so a
    server must run it where the files are isolated (``hopgym serve env``)."""

    # -- what the env is: facts the other layers read instead of knowing envs ----------------------------
    # Like OpenEnv's ``Environment.SUPPORTS_CONCURRENT_SESSIONS``; properties, as some depend on the kwargs.

    @property
    def first_turn(self) -> str:
        """The kind of the episode's first turn: :data:`STANDARD_TURN`, or the name of a turn the env reads
        its own way (:meth:`_special_turn`, e.g. FamilyTool's ``kg="extract"``: ``"kg-extraction"``). Only an
        agent that writes this kind can play the env (``Agent.first_turn``), and training, whose completion
        holds the whole episode, plays only the standard one."""
        return STANDARD_TURN

    @property
    def paper_metrics(self) -> tuple[str, ...]:
        """The keys of the terminal ``info["metrics"]`` that are the env's paper columns, each a per-task
        value whose mean over tasks is the paper's figure (adapters report them as columns; ``counts`` are
        dataset sums, never among them); ``()`` when it has none."""
        return ()

    @classmethod
    def paper_tables(cls, metrics: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str | None:
        """The run's results in its paper's table layouts (markdown), from each episode's terminal
        ``metrics`` and the run's ``run.json``; None when the env's paper has none (reports print none)."""
        return None

    def __init__(
        self, max_turns: int, feedback: FeedbackMode = "detailed", call_timeout: float | None = None
    ) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ConfigError(f"max_turns must be a positive integer, got {max_turns!r}")
        self.max_turns = max_turns
        self.feedback = check_feedback_mode(feedback)
        self._call_timeout = call_timeout
        self.sandbox: Sandbox | None = None
        self._owns_sandbox = False
        self.observation_space = ChatObservationSpace()
        self.action_space = AssistantActionSpace()
        self._task = None
        self._messages: list[Mapping[str, Any]] = []
        self._tools: list[Mapping[str, Any]] = []
        self._validator = ToolValidator([])
        self._validators: dict[int, tuple[tuple[Mapping[str, Any], ...], ToolValidator]] = {}
        """The validator of each task's tuple of schemas, by the tuple's id: see :meth:`_validator_for`."""
        self._classified_tools: list[Mapping[str, Any]] = []
        self._turns = 0
        self._calls_made = 0
        self._done = True
        self._closed = False
        self._sandbox_spec: tuple[str, dict[str, Any]] | None = None
        """The backend name and options of an owned sandbox: a copy of the env makes its own from them."""

    def _use_split(self, split: object, split_by: object) -> None:
        """Check and keep the ``split`` and ``split_by`` options; :meth:`_use_tasks` then keeps only the
        tasks on that side."""
        self.split, self.split_by = check_split(split, split_by, self.split_rules)

    def split_side(self, task: TaskT, rule: str) -> Split | None:
        """The side of ``rule`` (one of :attr:`split_rules`) ``task`` is on; None: in neither split. Here
        the ``task-id`` rule: the task's side by its hashed id (tasks/splits.py); an env declaring another
        rule overrides this."""
        check_choice("split_by", rule, self.split_rules)
        return key_side(task.id)

    def _use_tasks(self, tasks: Sequence[TaskT], data_files: Sequence[Path] = ()) -> None:
        """Set the env's :attr:`tasks` (those on :attr:`split`'s side, when one is chosen; and
        :attr:`_index_of` from their ids) and :attr:`data_files`."""
        if self.split is not None and self.split_by is not None:
            rule = self.split_by
            where = ", ".join(map(str, data_files)) or "the sampled tasks"
            tasks = split_tasks(tasks, self.split, rule, lambda task: self.split_side(task, rule), where)
        self.tasks = tasks
        self._index_of = {task.id: i for i, task in enumerate(tasks)}
        if len(self._index_of) < len(tasks):  # reset by task_id, records and --resume key on the id
            counts = Counter(task.id for task in tasks)
            repeated = sorted(task_id for task_id, count in counts.items() if count > 1)
            raise DataError(f"task ids must be unique; repeated: {', '.join(repeated[:10])}")
        self.data_files = tuple(data_files)

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

    # -- the episode loop --------------------------------------------------------------------------

    @final
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode on the task ``options`` name (``task_id`` or ``index``), else on one drawn with
        the env's RNG (seeded by ``seed``)."""
        if self._closed:
            raise HopgymError("this env was closed; make a new one")
        super().reset(seed=seed)
        self._done = True  # until the new episode has started: a failed start leaves nothing to step
        task = select_task(self.tasks, self._index_of, options, self.np_random)
        self._task = task
        start = self._episode_start(task)
        tools = start.tools
        classify_with = tools if start.classify_with is None else start.classify_with
        self._tools = list(tools)
        self._classified_tools = list(classify_with)
        self._validator = self._validator_for(classify_with)
        self._messages = list(start.messages)
        self._turns = 0
        self._calls_made = 0
        self._done = False
        return self._observation(), self._info([])

    def _validator_for(self, tools: Sequence[Mapping[str, Any]]) -> ToolValidator:
        """One validator per task for every episode when ``tools`` is a tuple (a task's ``tools``, fixed
        when the task was loaded): its schema checks and compiled argument validators are the same each
        episode (a copy of the schemas would cost as much as the checks). Any other list gets a new one."""
        if not isinstance(tools, tuple):
            return ToolValidator(tools)
        kept = self._validators.get(id(tools))
        if kept is None or kept[0] is not tools:
            kept = (tools, ToolValidator(tools))
            self._validators[id(tools)] = kept
        return kept[1]

    @final
    def step(self, action: Any) -> Step:
        if self._closed:
            raise HopgymError("this env was closed; make a new one")
        if self._done:
            raise HopgymError("step() called before reset() or after the episode ended; call reset()")
        action = checked_action(action)
        special = self._special_turn(action, self._turns + 1)
        if special is not None:
            for index, replacement in special.replaced.items():
                self._messages[index] = replacement
            self._messages.extend(special.messages)
            self._turns += 1
            self._calls_made += len(special.records)
            return self._turn_ran_tools(list(special.records))
        message = assistant_message(action)
        self._messages.append(message)
        self._turns += 1
        calls = [
            call_fields(call, f"call_{self._turns}_{i}")
            for i, call in enumerate(message.get("tool_calls", []))
        ]
        if self._is_final(calls):
            records = self._final_records(calls)
            self._calls_made += len(records)
            self._done = True
            score = self._score(message)
            info = self._info(records)
            info.update(score.info())
            return self._observation(), score.reward, True, False, info
        records = []
        for call in calls:
            record = self._run_call(call)
            records.append(record)
            self._calls_made += 1
            self._messages.append(self._tool_message(record))
            if self._run_stopped():
                self._done = True
                return self._observation(), 0.0, False, True, self._info(records)
        return self._turn_ran_tools(records)

    def _turn_ran_tools(self, records: list[CallRecord]) -> Step:
        """The step result of a turn whose calls ran: no reward yet, truncated once ``max_turns`` is spent."""
        truncated = self._turns >= self.max_turns
        self._done = truncated
        return self._observation(), 0.0, False, truncated, self._info(records)

    # -- hooks -------------------------------------------------------------------------------------

    @abstractmethod
    def _episode_start(self, task: TaskT) -> EpisodeStart:
        """The tools and first messages of an episode on ``task`` (already :attr:`_task`); the env resets
        its own per-episode state here and loads what the task's calls need."""

    def _special_turn(self, action: dict[str, Any] | str, turn: int) -> SpecialTurn | None:
        """Turn number ``turn`` run the env's own way (ToolHop's CodeAct actions, FamilyTool's extraction
        turn): what it adds to the episode, which the loop records; None (the default) for the standard
        turn."""
        return None

    def _is_final(self, calls: Sequence[CallRequest]) -> bool:
        """Whether the assistant message with these calls ends the episode (by default: no calls)."""
        return not calls

    def _final_records(self, calls: Sequence[CallRequest]) -> list[CallRecord]:
        """The records of the ending message's calls, which never run (FamilyTool's); by default none."""
        return []

    @abstractmethod
    def _score(self, message: Mapping[str, Any]) -> Score:
        """How the episode that ``message`` ended scored."""

    def gold_answer(self, task: TaskT) -> Any:
        """The gold answer of ``task`` as the terminal ``info["answer"]`` gives it: public so that an outside
        harness (an Inspect sample's target) can name it before an episode is played. None: not known before
        the episode (the default; the env's own scoring does not use it)."""
        return None

    def _run_call(self, call: CallRequest) -> CallRecord:
        """Validate one call, execute it (:meth:`_execute`) when valid, and return its record."""
        call_id, name, raw_arguments = call
        check = self._validator.check(name, raw_arguments)
        result = self._execute(name, check.arguments) if check.ok else None
        return call_record(call_id, name, check, result, self.feedback)

    def _execute(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """Run one validated call: by default in the sandbox, within the env's call deadline."""
        assert self.sandbox is not None
        return self.sandbox.call(name, arguments, timeout=self._call_timeout)

    def _tool_message(self, record: CallRecord) -> ToolMessage:
        """The chat message that shows a call record to the agent."""
        return tool_message(record)

    def _run_stopped(self) -> bool:
        """Whether the call just run ends the episode truncated and unscored (ToolHop's official protocol)."""
        return False

    # -- observation and info ----------------------------------------------------------------------

    def _observation(self) -> dict[str, Any]:
        # Shallow copies: a kept observation stays as it was returned, and it is plain JSON data.
        return {"messages": self._messages[:], "tools": self._tools[:]}

    @abstractmethod
    def _episode_info(self) -> dict[str, Any]:
        """The env's own ``info`` keys: ``task_id``, ``hops`` and what it documents."""

    def _tool_choice(self) -> str | None:
        """What the agent should send as ``tool_choice`` now (None: the env's pipeline sends none)."""
        return "auto"

    def _info(self, records: list[CallRecord]) -> dict[str, Any]:
        """The ``info`` of every ``reset`` and ``step``: the env's keys, then those every env reports."""
        return {
            **self._episode_info(),
            "feedback": self.feedback,
            "isolation": self.sandbox.isolation if self.sandbox is not None else self._NO_SANDBOX,
            "tool_choice": self._tool_choice(),
            "turn": self._turns,
            "num_calls": self._calls_made,
            "calls": records,
        }

    def close(self) -> None:
        if self._owns_sandbox and self.sandbox is not None:
            self.sandbox.close()
        self.sandbox = None
        self._closed = True
        self._done = True
        super().close()

    # -- copies (pickle, copy.deepcopy, vector envs) -----------------------------------------------

    _REBUILT: tuple[str, ...] = ("sandbox", "_validator", "_validators")
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
        self._validators = {}
        self._validator = ToolValidator(self._classified_tools)
        if self._sandbox_spec is not None and not self._closed:
            from hopgym.sandbox import make_sandbox

            backend, options = self._sandbox_spec
            self.sandbox = make_sandbox(backend, **options)
        self._restore()

    def _restore(self) -> None:
        """Rebuild what :attr:`_REBUILT` names beyond the sandbox, and reload a running episode's tools."""


def chat_env(env: gym.Env) -> ChatToolEnv[Any]:
    """The hopgym env under ``env``'s wrappers, typed, for callers that read its ``tasks`` or ``sandbox``."""
    inner = env.unwrapped
    if not isinstance(inner, ChatToolEnv):
        raise ConfigError(f"{inner} is not one of hopgym's chat envs ({type(inner).__name__})")
    return inner
