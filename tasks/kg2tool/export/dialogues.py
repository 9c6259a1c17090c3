"""Instruction data from KG2Tool tasks (paper Section 4.4, Appendix A.3), as ShareGPT, Alpaca or OpenAI
chat records.

Every task gives four kinds of record, each tagged with ``kind`` and ``task_id``:

- ``trajectory``: the system prompt listing the tools, the query, each tool call and its response, and the
  final answer (entity names one per line). ShareGPT follows LLaMA-Factory's function-calling layout
  (``human``/``function_call``/``observation``/``gpt`` turns, ``system``, ``tools``): the tool list is in
  ``tools`` only, since LLaMA-Factory's template writes it into the system prompt itself. Alpaca has no
  tool column, so its ``system`` lists the tools; it puts the earlier turns in ``history`` (tool responses
  on the user side) and the final answer in ``output``. OpenAI is the chat-completions layout that TRL's
  SFTTrainer and Hugging Face chat templates read: ``messages`` (system, user, assistant turns with
  ``tool_calls`` whose ``arguments`` are a JSON string, ``tool`` turns answering them by
  ``tool_call_id``) and ``tools`` (``{"type": "function", "function": ...}`` documents).
- ``steps``: the per-step questions of Figure 12 (the goal of the step, the tool to call, its arguments,
  then the call, its response and a summary), ending with the final answer.
- ``plan``: the query broken down into numbered subtasks (the step goals).
- ``review``: one step's tool response, either the true one or a corrupted one (an entity dropped, an
  entity replaced, or an empty response), with the question whether it achieves the step; the true one is
  answered "Yes", the corrupted one "No". Corrupted responses always differ from the truth as sets.

``read_trajectory`` parses a trajectory record back into its calls and answer names (the round trip), and
``validate_record`` checks a record against its format. The fixed texts are in
tasks/prompts/kg2tool_export.yaml.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import IO, Any, TypedDict

from hopgym.errors import ConfigError, DataError
from hopgym.prompts import load_prompts
from hopgym.tasks.kg2tool.task_file import KG2ToolTask, SolutionCall
from hopgym.tasks.user_files import read_user_text

EXPORT_FORMATS = ("sharegpt", "alpaca", "openai")
RECORD_KINDS = ("trajectory", "steps", "plan", "review")


class ExportPrompts(TypedDict):
    system: str
    tool_list_intro: str
    goal_question: str
    tool_question: str
    arguments_question: str
    call_request: str
    answer_question: str
    plan_question: str
    review_question: str


PROMPTS = load_prompts("hopgym.tasks.prompts", "kg2tool_export.yaml", ExportPrompts)
SYSTEM_PROMPT = PROMPTS["system"]
TOOL_LIST_INTRO = PROMPTS["tool_list_intro"]
GOAL_QUESTION = PROMPTS["goal_question"]
TOOL_QUESTION = PROMPTS["tool_question"]
ARGUMENTS_QUESTION = PROMPTS["arguments_question"]
CALL_REQUEST = PROMPTS["call_request"]
ANSWER_QUESTION = PROMPTS["answer_question"]
PLAN_QUESTION = PROMPTS["plan_question"]
REVIEW_QUESTION = PROMPTS["review_question"]
CORRUPTIONS = ("drop", "replace", "empty")

_ACTION = "Action: "
_ACTION_INPUT = "Action Input: "
_OBSERVATION = "Observation: "

ToolDocs = Sequence[Mapping[str, Any]]
"""Function documents ``{"name", "description", "parameters"}`` of the tools offered with a task."""


@dataclass(frozen=True)
class Trajectory:
    """What a trajectory record holds: (name, arguments, result) per call, and the answer names."""

    calls: tuple[tuple[str, dict[str, Any], list[str]], ...]
    answer: tuple[str, ...]


def answer_text(task: KG2ToolTask, label: Callable[[str], str]) -> str:
    """The final answer: the distinct names of the answer entities, sorted, one per line."""
    return "\n".join(sorted({label(entity) for entity in task.answers}))


def system_prompt(tools: ToolDocs) -> str:
    """The system prompt with the tool list in it, for formats that have no tool column (Alpaca)."""
    return SYSTEM_PROMPT + TOOL_LIST_INTRO + json.dumps(list(tools), ensure_ascii=False)


def export_records(
    tasks: Sequence[KG2ToolTask],
    fmt: str,
    tools_for: Callable[[KG2ToolTask], ToolDocs],
    label: Callable[[str], str],
    seed: int = 0,
    kinds: Sequence[str] = RECORD_KINDS,
) -> Iterator[dict[str, Any]]:
    """Every record of the chosen ``kinds`` for each task, in task order; deterministic for a seed.

    ``tools_for`` gives the tools offered with a task (its solution's tools and any distractors);
    ``label`` names an answer entity. Review corruptions replace entities with results of other steps
    and tasks in the batch, so they stay plausible.
    """
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    unknown = [kind for kind in kinds if kind not in RECORD_KINDS]
    if unknown:
        raise ConfigError(f"unknown record kind(s) {unknown}; valid: {', '.join(RECORD_KINDS)}")
    pool = sorted({item for task in tasks for call in task.solution for item in call.result})
    for task in tasks:
        rng = random.Random(f"{seed}:{task.id}")
        tools = list(tools_for(task))
        dialogues: list[tuple[str, list[tuple[str, str]]]] = []
        if "trajectory" in kinds:
            dialogues.append(("trajectory", _trajectory_turns(task, label)))
        if "steps" in kinds:
            dialogues.append(("steps", _step_turns(task, label)))
        if "plan" in kinds:
            dialogues.append(("plan", _plan_turns(task)))
        if "review" in kinds:
            dialogues += [("review", turns) for turns in _review_turns(task, rng, pool)]
        for index, (kind, turns) in enumerate(dialogues):
            record = _FORMATTERS[fmt](turns, tools)
            record.update(id=f"{task.id}/{index}-{kind}", task_id=task.id, kind=kind)
            yield record


# ---------------------------------------------------------------------------------------- dialogues
# A dialogue is a list of (role, text) turns with roles human, gpt, function_call and observation.


def _call_text(call: SolutionCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def _result_text(result: Sequence[str]) -> str:
    return json.dumps(list(result), ensure_ascii=False)


def _summary(call: SolutionCall) -> str:
    found = ", ".join(call.result) if call.result else "nothing"
    return f"{call.goal}: {found}."


def _trajectory_turns(task: KG2ToolTask, label: Callable[[str], str]) -> list[tuple[str, str]]:
    turns = [("human", task.query)]
    for call in task.solution:
        turns += [("function_call", _call_text(call)), ("observation", _result_text(call.result))]
    return [*turns, ("gpt", answer_text(task, label))]


def _step_turns(task: KG2ToolTask, label: Callable[[str], str]) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for number, call in enumerate(task.solution):
        question = f"{task.query} {GOAL_QUESTION}" if number == 0 else GOAL_QUESTION
        turns += [
            ("human", question),
            ("gpt", call.goal),
            ("human", TOOL_QUESTION),
            ("gpt", call.name),
            ("human", ARGUMENTS_QUESTION),
            ("gpt", json.dumps(call.arguments, ensure_ascii=False)),
            ("human", CALL_REQUEST),
            ("function_call", _call_text(call)),
            ("observation", _result_text(call.result)),
            ("gpt", _summary(call)),
        ]
    return [*turns, ("human", ANSWER_QUESTION), ("gpt", answer_text(task, label))]


def plan_text(task: KG2ToolTask) -> str:
    """The subtasks of a task, numbered as in the paper's Figure 11."""
    return "; ".join(f"{number}. {call.goal}" for number, call in enumerate(task.solution, start=1))


def _plan_turns(task: KG2ToolTask) -> list[tuple[str, str]]:
    return [("human", f"{task.query} {PLAN_QUESTION}"), ("gpt", plan_text(task))]


def corrupt_result(result: Sequence[str], how: str, pool: Sequence[str], rng: random.Random) -> list[str]:
    """A wrong tool response made from a true one; it always differs from ``result`` as a set.

    ``drop`` removes one entity (from a single-entity result: ``replace`` instead), ``replace`` swaps one
    for an entity of ``pool`` not in the result, ``empty`` returns nothing (for an empty result: one
    entity of ``pool``).
    """
    if how not in CORRUPTIONS:
        raise ConfigError(f"unknown corruption {how!r}; valid: {', '.join(CORRUPTIONS)}")
    truth = list(result)
    in_truth = set(truth)
    outsiders = [item for item in pool if item not in in_truth]
    if not truth:
        if not outsiders:
            raise DataError("cannot corrupt an empty response without other entities to put in it")
        return [outsiders[rng.randrange(len(outsiders))]]
    if how == "empty":
        return []
    if how == "drop" and len(truth) > 1:
        del truth[rng.randrange(len(truth))]
        return truth
    if not outsiders:
        return []
    truth[rng.randrange(len(truth))] = outsiders[rng.randrange(len(outsiders))]
    return sorted(truth)


def _review_turns(task: KG2ToolTask, rng: random.Random, pool: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Two review dialogues on one step: the true response (Yes) and a corrupted one (No)."""
    call = task.solution[rng.randrange(len(task.solution))]
    wrong = corrupt_result(call.result, CORRUPTIONS[rng.randrange(len(CORRUPTIONS))], pool, rng)
    return [_review(task, call, call.result, "Yes"), _review(task, call, wrong, "No")]


def _review(
    task: KG2ToolTask, call: SolutionCall, response: Sequence[str], verdict: str
) -> list[tuple[str, str]]:
    question = (
        f"Query: {task.query}\nCurrent step: {call.goal}\nTool call: {_call_text(call)}\n"
        f"Tool response: {_result_text(response)}\n{REVIEW_QUESTION}"
    )
    return [("human", question), ("gpt", verdict)]


# ------------------------------------------------------------------------------------------ formats


def _sharegpt(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    return {
        "conversations": [{"from": role, "value": text} for role, text in turns],
        "system": SYSTEM_PROMPT,
        "tools": json.dumps(list(tools), ensure_ascii=False),
    }


def _openai(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    """Calls become assistant ``tool_calls`` (ids ``call_0``, ``call_1`` ... in the record), responses
    ``tool`` messages naming the call they answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    calls = 0
    for role, text in turns:
        if role == "function_call":
            call = json.loads(text)
            arguments = json.dumps(call["arguments"], ensure_ascii=False)
            function = {"name": call["name"], "arguments": arguments}
            tool_call = {"id": f"call_{calls}", "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
            calls += 1
        elif role == "observation":
            call = messages[-1]["tool_calls"][0]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": text,
                }
            )
        else:
            messages.append({"role": "user" if role == "human" else "assistant", "content": text})
    return {"messages": messages, "tools": [{"type": "function", "function": dict(t)} for t in tools]}


def _alpaca_text(role: str, text: str) -> str:
    """A turn as Alpaca text: calls in ReAct form, responses as observations."""
    if role == "function_call":
        call = json.loads(text)
        return f"{_ACTION}{call['name']}\n{_ACTION_INPUT}{json.dumps(call['arguments'], ensure_ascii=False)}"
    if role == "observation":
        return f"{_OBSERVATION}{text}"
    return text


def _alpaca(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    """User-side turns (human, observation) and model-side turns paired in order; the last pair is the
    instruction and output, the earlier ones the history."""
    pairs = [(_alpaca_text(*turns[k]), _alpaca_text(*turns[k + 1])) for k in range(0, len(turns), 2)]
    *history, (instruction, output) = pairs
    return {
        "instruction": instruction,
        "input": "",
        "output": output,
        "system": system_prompt(tools),
        "history": [list(pair) for pair in history],
    }


_FORMATTERS = {"sharegpt": _sharegpt, "alpaca": _alpaca, "openai": _openai}


_USER_SIDE = frozenset({"human", "observation"})
_MODEL_SIDE = frozenset({"gpt", "function_call"})


def validate_record(record: Any, fmt: str) -> None:
    """Check one exported record against its format; DataError says what is wrong.

    ShareGPT: ``conversations`` alternates user-side (human, observation) and model-side (gpt,
    function_call) turns, starts with human, ends with gpt, every observation follows a function call
    whose value is a JSON ``{"name", "arguments"}``; ``system`` and ``tools`` are strings. Alpaca:
    string ``instruction``, ``input``, ``output``, ``system`` and ``history`` as [instruction, output]
    string pairs. OpenAI: ``tools`` lists function documents; ``messages`` is a system message, then the
    same alternation as ShareGPT (user, assistant, assistant with one tool call, tool answering that
    call's id), each call naming a listed tool with JSON-object arguments.
    """
    if not isinstance(record, Mapping):
        raise DataError(f"a {fmt} record must be an object, got {type(record).__name__}")
    for key in ("id", "task_id", "kind"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{fmt} record lacks a string {key!r}")
    where = record["id"]
    if fmt == "sharegpt":
        _validate_sharegpt(record, where)
    elif fmt == "alpaca":
        _validate_alpaca(record, where)
    elif fmt == "openai":
        _validate_openai(record, where)
    else:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")


def _validate_sharegpt(record: Mapping[str, Any], where: str) -> None:
    if not isinstance(record.get("system"), str) or not isinstance(record.get("tools"), str):
        raise DataError(f"{where}: 'system' and 'tools' must be strings")
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise DataError(f"{where}: 'conversations' must be a list of turns")
    for position, turn in enumerate(turns):
        if not (
            isinstance(turn, Mapping) and set(turn) == {"from", "value"} and isinstance(turn["value"], str)
        ):
            raise DataError(f"{where}: turn {position} must be {{'from', 'value'}} with a string value")
    _validate_turns([(turn["from"], turn["value"]) for turn in turns], where)


def _validate_turns(turns: Sequence[tuple[str, str]], where: str) -> None:
    """The dialogue rules the conversational formats share (see :func:`validate_record`)."""
    if len(turns) < 2 or len(turns) % 2:
        raise DataError(f"{where}: a conversation must be an even, non-empty list of turns")
    for position, (role, text) in enumerate(turns):
        side = _USER_SIDE if position % 2 == 0 else _MODEL_SIDE
        if role not in side:
            raise DataError(f"{where}: turn {position} is {role!r}; expected one of {sorted(side)}")
        if role == "observation" and turns[position - 1][0] != "function_call":
            raise DataError(f"{where}: turn {position} is an observation that follows no function call")
        if role == "function_call":
            _parse_call(text, f"{where}: turn {position}")
    if turns[0][0] != "human" or turns[-1][0] != "gpt":
        raise DataError(f"{where}: a conversation starts with human and ends with gpt")


def _validate_openai(record: Mapping[str, Any], where: str) -> None:
    tools = record.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(tool, Mapping)
        and tool.get("type") == "function"
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
        for tool in tools
    ):
        raise DataError(f"{where}: 'tools' must be a list of function documents with a type and a name")
    messages = record.get("messages")
    if not (isinstance(messages, list) and messages and isinstance(messages[0], Mapping)) or (
        messages[0].get("role") != "system"
    ):
        raise DataError(f"{where}: 'messages' must be a list that starts with the system message")
    turns = _openai_turns(messages[1:], where)
    _validate_turns(turns, where)
    offered = {tool["function"]["name"] for tool in tools}
    for position, (role, text) in enumerate(turns):
        if role == "function_call" and (name := json.loads(text)["name"]) not in offered:
            raise DataError(f"{where}: turn {position} calls {name!r}, which 'tools' does not list")


_OPENAI_ROLES = {"user": "human", "assistant": "gpt", "tool": "observation"}


def _openai_turns(messages: Sequence[Any], where: str) -> list[tuple[str, str]]:
    """OpenAI chat messages (after the system message) as (role, text) turns in the ShareGPT vocabulary;
    DataError for a malformed message or a tool message that answers no pending call."""
    turns: list[tuple[str, str]] = []
    pending: str | None = None  # the id of the call the next tool message must answer
    for position, message in enumerate(messages, start=1):
        role = message.get("role") if isinstance(message, Mapping) else None
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            if not (isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], Mapping)):
                raise DataError(f"{where}: message {position} must hold exactly one tool call")
            function = calls[0].get("function") or {}
            text = function.get("arguments")
            try:
                arguments = json.loads(text) if isinstance(text, str) else None
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                raise DataError(f"{where}: message {position}: arguments must be a JSON object in a string")
            pending = calls[0].get("id")
            call = {"name": function.get("name"), "arguments": arguments}
            turns.append(("function_call", json.dumps(call, ensure_ascii=False)))
            continue
        if role not in _OPENAI_ROLES or not isinstance(message.get("content"), str):
            raise DataError(
                f"{where}: message {position} must be a user, assistant or tool message with text"
            )
        if role == "tool":
            if pending is None or message.get("tool_call_id") != pending:
                raise DataError(f"{where}: message {position} answers no pending tool call")
            pending = None
        turns.append((_OPENAI_ROLES[role], message["content"]))
    return turns


def _validate_alpaca(record: Mapping[str, Any], where: str) -> None:
    for key in ("instruction", "input", "output", "system"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{where}: {key!r} must be a string")
    history = record.get("history")
    if not isinstance(history, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(text, str) for text in pair)
        for pair in history
    ):
        raise DataError(f"{where}: 'history' must be a list of [instruction, output] string pairs")


def _parse_call(text: str, where: str) -> tuple[str, dict[str, Any]]:
    try:
        call = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: a function call must be JSON ({exc.msg})") from exc
    if not (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), dict)
    ):
        raise DataError(f"{where}: a function call must be {{'name': str, 'arguments': object}}")
    return call["name"], call["arguments"]


def read_trajectory(record: Mapping[str, Any], fmt: str) -> Trajectory:
    """The calls and answer names of an exported trajectory record (the inverse of the export)."""
    validate_record(record, fmt)
    if record["kind"] != "trajectory":
        raise DataError(
            f"{record['id']}: only trajectory records hold a whole solution, not {record['kind']!r}"
        )
    if fmt == "sharegpt":
        turns = [(turn["from"], turn["value"]) for turn in record["conversations"]]
    elif fmt == "openai":
        turns = _openai_turns(record["messages"][1:], record["id"])
    else:
        texts = [text for pair in record["history"] for text in pair] + [
            record["instruction"],
            record["output"],
        ]
        turns = [_alpaca_turn(text, position, record["id"]) for position, text in enumerate(texts)]
    calls = []
    for (role, text), (next_role, next_text) in pairwise(turns):
        if role == "function_call":
            if next_role != "observation":
                raise DataError(f"{record['id']}: a function call without its response")
            name, arguments = _parse_call(text, record["id"])
            calls.append((name, arguments, json.loads(next_text)))
    return Trajectory(calls=tuple(calls), answer=tuple(line for line in turns[-1][1].split("\n") if line))


def _alpaca_turn(text: str, position: int, where: str) -> tuple[str, str]:
    """Recover the role and ShareGPT-style value of one Alpaca text (even positions are user-side)."""
    if position % 2 == 0:
        if text.startswith(_OBSERVATION):
            return "observation", text[len(_OBSERVATION) :]
        return "human", text
    if text.startswith(_ACTION):
        head, _, rest = text.partition("\n")
        if not rest.startswith(_ACTION_INPUT):
            raise DataError(f"{where}: an Action line must be followed by an Action Input line")
        arguments = json.loads(rest[len(_ACTION_INPUT) :])
        return "function_call", json.dumps({"name": head[len(_ACTION) :], "arguments": arguments})
    return "gpt", text


def write_export(records: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write records as one JSON array (a ``.json`` path, as Alpaca and ShareGPT files usually are, the
    bytes of ``json.dumps(records, ensure_ascii=False, indent=1)``) or as JSON Lines (any other suffix);
    returns how many were written. Records are written as they come (an export can be hundreds of MB),
    into a file renamed to ``path`` once complete, so an interrupted export leaves no partial file under
    that name (a symlink's file is replaced, not the link; a device or pipe, e.g. /dev/stdout, is written
    through)."""
    target = Path(path)
    array = target.suffix == ".json"
    if target.exists() and not target.is_file():
        try:
            with target.open("w", encoding="utf-8") as handle:
                return _write_rows(handle, records, array)
        except OSError as exc:
            raise DataError(f"cannot write the export to {target}: {exc}") from exc
    final = target.resolve()
    partial = final.with_name(f"{final.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            count = _write_rows(handle, records, array)
        partial.replace(final)
    except BaseException as exc:  # interrupted or failed: the partial file goes, a previous export stays
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DataError(f"cannot write the export to {target}: {exc}") from exc
        raise
    return count


def _write_rows(handle: IO[str], records: Iterable[Mapping[str, Any]], array: bool) -> int:
    count = 0
    for row in records:
        if array:  # an array element of indent=1: each line of the record one space in
            element = json.dumps(row, ensure_ascii=False, indent=1).replace("\n", "\n ")
            handle.write(("[\n " if count == 0 else ",\n ") + element)
        else:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        count += 1
    if array:
        handle.write("\n]\n" if count else "[]\n")
    return count


def read_export(path: str | Path) -> list[dict[str, Any]]:
    """The records of a file written by :func:`write_export` (a JSON array or JSON Lines)."""
    target = Path(path)
    try:
        text = read_user_text(target, "KG2Tool export")
        if target.suffix == ".json":
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read the export {target}: {exc}") from exc
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{target}: an export holds a list of JSON objects")
    return rows
