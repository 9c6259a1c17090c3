"""TRL's ``environment_factory`` classes generated from an env's tool schemas: one class per tool set.

TRL (``GRPOTrainer(environment_factory=...)``) renders a class's tool schemas once, from its public methods'
type hints and Google-style docstrings, so ToolHop's per-query tools need a class per tool set. Each class
made here has one method per tool of its set, whose signature (keyword-only, the schema's required ones
without default), annotations and docstring make ``transformers.get_json_schema`` render the env's schema:
name, description, each parameter's type (arrays with their item type, enums as ``Literal``), description
and ``required``. What a type hint cannot hold is left out of the rendered schema (``default``,
``minimum``/``maximum``, ``minItems``/``maxItems``, ``format``, nested objects' ``properties``, items'
descriptions): the env still validates every call against its full schema.

The method takes ``**arguments`` behind its shown signature, so a call with an argument the schema lacks
or without a required one reaches the env, which classifies it (``parameter_hallucination``,
``parameter_missing``) and answers with its own feedback. Every call is one ``env.step`` with one tool call
(a reply with k parallel calls spends k of the env's ``max_turns``); the method returns the env's tool
message as TRL shows it to the model. A call of a name the class lacks never reaches hopgym: TRL answers
"Tool X not found." itself. After the env ended the episode (``max_turns`` spent) a call raises, which TRL
shows the model as the call's error.

TRL ends a rollout when the model stops calling tools and never tells the instance the final message:
the reward function :func:`final_answer` (``completions`` and ``environments`` in) steps each env with its
completion's last assistant text, and ``get_reward()`` then returns the env's reward (0.0 for an episode
that did not end: the tool loop or the token budget stopped it). Envs come from one
:class:`~hopgym.serving.rollouts.Rollouts` pool per env: an instance holds one from ``reset`` to
``get_reward``; :meth:`EnvironmentSet.close` closes them all with their sandbox workers.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Union

import gymnasium as gym

from hopgym.envs.outcome import Outcome
from hopgym.errors import ActionError, ConfigError, HopgymError, ModelError, error_text
from hopgym.serving.rollouts import Rollouts
from hopgym.serving.task_rows import task_starts, trl_row
from hopgym.train.rollout import TrainEpisode, check_env, record_outcome, unended_episode

_SCALARS: Mapping[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
    "array": list,
    "object": dict,
}
RESERVED = ("reset", "get_reward", "record")
"""Names no tool may take: TRL's own methods, and the instance's episode record."""


def type_hint(schema: Mapping[str, Any]) -> Any:
    """The Python type hint ``get_json_schema`` renders as ``schema``'s type (enums as ``Literal``, arrays
    with their item type, objects with their value type; a schema without a type: ``Any``)."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str | int | float | bool) for v in enum):
        return Literal[tuple(enum)]
    kind = schema.get("type")
    if isinstance(kind, list):
        return Union[tuple(type_hint({**schema, "type": k}) for k in kind)]  # noqa: UP007 - built at runtime
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if kind is None and isinstance(alternatives, list) and alternatives:
        return Union[tuple(type_hint(a) for a in alternatives)]  # noqa: UP007 - built at runtime
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return list[type_hint(schema["items"])]  # type: ignore[misc]
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return dict[str, type_hint(schema["additionalProperties"])]  # type: ignore[misc]
    return _SCALARS.get(kind, Any) if isinstance(kind, str) else Any


def _one_line(text: Any) -> str:
    """Docstring text on one line: the docstring parser reads a new line as the start of another argument."""
    return " ".join(str(text or "").split())


def tool_method(function: Mapping[str, Any]) -> Callable[..., str]:
    """A method calling tool ``function`` (an OpenAI function schema) through the env, shown to
    ``get_json_schema`` with the schema's parameters (see the module docstring)."""
    name = function.get("name")
    if not isinstance(name, str) or not name or name.startswith("_") or name in RESERVED:
        raise ConfigError(
            f"tool name {name!r} cannot be a TRL environment method: it must be a non-empty string, not "
            f"start with '_' and not be one of {', '.join(RESERVED)}"
        )
    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())

    def method(self: HopgymEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    annotations = {key: type_hint(value) for key, value in properties.items()}
    shown = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            key,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=hint,
            default=inspect.Parameter.empty if key in required else None,
        )
        for key, hint in annotations.items()
    ]
    method.__signature__ = inspect.Signature(shown, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    method.__name__ = method.__qualname__ = name
    lines = [_one_line(function.get("description")) or name]
    if properties:
        lines += ["", "Args:"] + [
            f"    {key}: {_one_line(value.get('description')) or key}" for key, value in properties.items()
        ]
    method.__doc__ = "\n".join(lines)
    return method


class EnvironmentSet:
    """The ``environment_factory`` classes of one env's tasks at ``indices`` (default: all; see
    :func:`~hopgym.serving.task_rows.select_tasks`), one class per tool set, their dataset rows and
    the pool of envs behind their instances: ``concurrency`` envs, at least the rollouts of a generation
    batch on this env (an instance holds its env from ``reset`` to ``get_reward``)."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        concurrency: int = 8,
        indices: Sequence[int] | None = None,
    ) -> None:
        self.rollouts = Rollouts(env_id, env_kwargs, concurrency)
        self._loop = asyncio.new_event_loop()
        first = self.rollouts.make_env()
        try:
            check_env(first, env_id)
            rows = [trl_row(start) for start in task_starts(first, indices)]
            self._loop.run_until_complete(self.rollouts.start(first_env=first, prefill=False))
        except BaseException:
            first.close()
            self.rollouts.shutdown()
            self._loop.close()
            raise
        self.held = 0
        self.episodes: list[TrainEpisode] = []
        """Every scored episode's record, in the order ``get_reward`` scored them."""
        self.factories: dict[str, type[HopgymEnvironment]] = {}
        self.rows: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        short = env_id.split("-v", 1)[0].replace("-", "_")
        for row in rows:
            name = names.get(row["tools"])
            if name is None:
                name = names[row["tools"]] = f"{short}_tools_{len(names)}"
                self.factories[name] = environment_class(name, self, json.loads(row["tools"]))
            self.rows.append({**row, "environment": name})

    def dataset(self) -> Any:
        """The rows as a ``datasets.Dataset``: ``prompt``, ``environment`` (the class's name), ``task_id``,
        ``index``, ``tools``."""
        from datasets import Dataset

        return Dataset.from_list(self.rows)

    def acquire(self) -> gym.Env:
        if self.held >= self.rollouts.concurrency:
            raise ConfigError(
                f"more than {self.rollouts.concurrency} rollouts of {self.rollouts.env_id} at once: make the "
                "EnvironmentSet with a concurrency of at least the generation batch"
            )
        env = self._loop.run_until_complete(self.rollouts.acquire())
        self.held += 1
        return env

    def release(self, env: gym.Env, healthy: bool) -> None:
        self.held -= 1
        self.rollouts.release(env, healthy)  # the pool is safe from any thread, no loop needed

    def close(self) -> None:
        """Close every env of the pool and its sandbox workers (instances still holding one too); once."""
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self.rollouts.close())
        finally:
            self._loop.close()


def mixed(sets: Sequence[EnvironmentSet]) -> tuple[dict[str, type[HopgymEnvironment]], Any]:
    """One run over several envs: TRL's dict ``environment_factory`` and the dataset of every set's rows."""
    from datasets import Dataset

    factories: dict[str, type[HopgymEnvironment]] = {}
    for environments in sets:
        clash = sorted(factories.keys() & environments.factories.keys())
        if clash:
            raise ConfigError(
                f"two environment sets name classes alike ({', '.join(clash[:3])}): one per env"
            )
        factories.update(environments.factories)
    return factories, Dataset.from_list([row for environments in sets for row in environments.rows])


def environment_class(
    name: str, owner: EnvironmentSet, tools: Sequence[Mapping[str, Any]]
) -> type[HopgymEnvironment]:
    """A :class:`HopgymEnvironment` subclass named ``name`` with one method per tool of ``tools``."""
    methods = {str(tool["function"]["name"]): tool_method(tool["function"]) for tool in tools}
    namespace: dict[str, Any] = {**methods, "_owner": owner, "_tools": list(tools)}
    return type(name, (HopgymEnvironment,), namespace)


class HopgymEnvironment:
    """One rollout's episode on a hopgym env, as TRL drives it: ``reset(**row)``, one method per tool,
    ``get_reward()``. Subclasses come from :func:`environment_class`."""

    _owner: ClassVar[EnvironmentSet]
    _tools: ClassVar[list[Mapping[str, Any]]]

    def __init__(self) -> None:
        self._env: gym.Env | None = None
        self._open = False
        """The env's episode has not ended."""
        self._answered = False
        """:func:`final_answer` has seen this rollout."""
        self._error: str | None = None
        self._seen = 0
        """Messages of the chat before the last step."""
        self.record: TrainEpisode | None = None

    def reset(self, **row: Any) -> None:
        """Start the episode of the row's task on an env of the pool; the prompt is the row's own."""
        self._give_back(healthy=self._error is None)
        self._error, self._answered = None, False
        self.record = unended_episode(str(row["task_id"]))
        env = self._env = self._owner.acquire()
        observation, _ = self._step(env.reset, options={"task_id": row["task_id"]})
        if [dict(tool) for tool in observation["tools"]] != self._tools:
            raise ConfigError(f"task {row['task_id']!r} offers other tools than {type(self).__name__}'s")
        self._open = True
        self._seen = len(observation["messages"])

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        added = self._act({"role": "assistant", "content": "", "tool_calls": [call]}, "", well_formed=True)
        return "\n".join(str(message.get("content") or "") for message in added)

    def _answer(self, text: str) -> None:
        self._answered = True
        if self._open and self._error is None:  # a failed episode is reported by get_reward
            self._act(text, text, well_formed=bool(text.strip()))

    def _act(self, action: dict[str, Any] | str, text: str, well_formed: bool) -> list[Mapping[str, Any]]:
        """One ``env.step``: its record kept, the messages it added returned."""
        if self._error is not None:
            raise HopgymError(f"the episode failed: {self._error}")
        if not self._open or self._env is None or self.record is None:
            raise HopgymError("the episode has ended (its turns are spent): answer without calling tools")
        observation, reward, terminated, truncated, info = self._step(self._env.step, action)
        self.record["turns"].append(
            {
                "text": text,
                "action": action,
                "well_formed": well_formed,
                "calls": list(info.get("calls") or []),
                "reward": float(reward),
                "terminated": terminated,
                "truncated": truncated,
            }
        )
        outcome = Outcome.of_step(reward, terminated, truncated, info)
        if outcome.ended:
            self._open = False
            record_outcome(self.record, outcome)
        added = observation["messages"][self._seen + 1 :]  # after the assistant message sent
        self._seen = len(observation["messages"])
        return [message for message in added if message.get("role") == "tool"]

    def _step(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function`` on the env, timed into the record; a failure other than a bad action leaves the
        env unhealthy."""
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        except (ActionError, ModelError):
            raise
        except Exception as exc:
            self._error = error_text(exc)
            raise
        finally:
            if self.record is not None:
                self.record["env_seconds"] += time.perf_counter() - started

    def get_reward(self) -> float:
        """The env's reward of the episode (0.0 when it did not end); the env goes back to the pool."""
        if self.record is None:
            raise HopgymError("get_reward() before reset()")
        if not self._answered:
            raise ConfigError(
                "the final answer never reached the env: pass hopgym.train.environments.final_answer in "
                "reward_funcs (TRL tells only reward functions the completion)"
            )
        failed = self._error
        self._give_back(healthy=failed is None)
        if failed is not None:
            raise HopgymError(f"episode of {self.record['task_id']} failed: {failed}")
        self._owner.episodes.append(self.record)
        return self.record["reward"]

    def _give_back(self, healthy: bool) -> None:
        if self._env is not None:
            env, self._env, self._open = self._env, None, False
            self._owner.release(env, healthy)


def final_answer(
    completions: Sequence[Any], environments: Sequence[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """TRL reward function that only delivers each completion's final answer to its env (no reward of
    its own: None; ``get_reward`` scores): the last message's text when it is an assistant message without
    tool calls; a rollout that ended on a call (tool loop or token budget) sends none."""
    if environments is None:
        raise ConfigError("final_answer needs TRL's environment_factory (no environments were passed)")
    for completion, environment in zip(completions, environments, strict=True):
        if not isinstance(environment, HopgymEnvironment):
            continue
        last = completion[-1] if isinstance(completion, list) and completion else {}
        if isinstance(last, Mapping) and last.get("role") == "assistant" and not last.get("tool_calls"):
            environment._answer(str(last.get("content") or ""))
        else:
            environment._answered = True
    return [None] * len(completions)
