"""FamilyTool (Wang et al., 2025): family KGs and the JSONL rows, parsed into typed tasks.

A row is four messages: id, candidate tools, the user text (``<speak>Speaker: X</speak> query  The extra
information for the query is ([h, r, t], ...).``) and exactly one gold call. The loader tolerates the
dataset's noise (both triple quotings, ``Person:`` or missing speaker tags, trailing "." or space after a
speaker name, tool documents whose ``properties`` is a list) and exposes what the official metrics parse.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from hopgym.errors import DataError
from hopgym.messages import ToolSchema, tool_schema
from hopgym.options import check_choice
from hopgym.tasks.data_files import resolve_data_file
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg.triples import Triple, parse_triples, quotes_triples
from hopgym.tasks.user_files import read_user_text

DATA_FOLDER = "familytool"
Variant = Literal["b", "e"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
EXTRA_INFO_MARKER = "The extra information for the query is"
"""The dataset's and the official pipeline's wording (the paper's prose says "for this query")."""

_SPEAKER_TAG = re.compile(r"^\s*<speak>\s*(?P<label>[^:<]*):(?P<name>[^<]*)</speak>")


@dataclass(frozen=True)
class ToolDoc:
    """A candidate tool; ``parameters`` is always a JSON-Schema object (list-form properties converted)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    response: Mapping[str, Any] | None = None

    def openai_schema(self) -> ToolSchema:
        """The tool in OpenAI's ``tools=[...]`` format."""
        return tool_schema(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class FamilyToolGoldCall:
    """The row's one gold call: tool name, arguments (the dataset's ``parameters``) and ``depend_on``."""

    name: str
    arguments: Mapping[str, Any]
    depend_on: tuple[Any, ...] = ()


@dataclass(frozen=True)
class FamilyToolTask:
    """One FamilyTool row.

    ``query`` is the user's words alone (no speaker tag, no inlined sub-KG); ``user_text`` is the row's text
    unchanged (the ``kg="gold"`` prompt). ``speaker`` is None for the rows without a speaker tag.
    ``gold_call_text`` is the row's gold call content as JSON text, where the official Coverage metric looks
    for the entities the call uses.
    """

    id: str
    variant: str
    speaker: str | None
    speaker_label: str | None
    query: str
    user_text: str
    gold_subkg: tuple[Triple, ...]
    subkg_quoting: Literal["python", "bare"]
    gold_call: FamilyToolGoldCall
    gold_call_text: str
    candidate_tools: tuple[ToolDoc, ...] = field(repr=False)

    @property
    def hops(self) -> int:
        """Triples in the golden sub-KG (the hop count of SOURCE.md and the paper's Table 2)."""
        return len(self.gold_subkg)

    @property
    def gold_entities(self) -> tuple[str, ...]:
        """Heads and tails of the golden sub-KG, in order of appearance."""
        return tuple(dict.fromkeys(e for h, _, t in self.gold_subkg for e in (h, t)))

    @property
    def used_gold_entities(self) -> tuple[str, ...]:
        """Gold entities occurring as a substring of the gold call's JSON text (the official "used" rule)."""
        return tuple(e for e in self.gold_entities if e in self.gold_call_text)


def familytool_data_file(variant: str, data_path: str | os.PathLike[str] | None = None) -> Path:
    """The path of familytool-{variant}.jsonl: ``data_path``, else under ``$HOPGYM_DATA/familytool/``."""
    _check_variant(variant)
    return resolve_data_file(data_path, DATA_FOLDER, f"familytool-{variant}.jsonl")


def load_familytool(variant: str, data_path: str | os.PathLike[str] | None = None) -> list[FamilyToolTask]:
    """All rows of familytool-{variant}.jsonl; ``data_path`` defaults to ``$HOPGYM_DATA/familytool/``."""
    path = familytool_data_file(variant, data_path)
    lines = read_user_text(path, "FamilyTool data file").splitlines()
    tasks = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            tasks.append(parse_row(json.loads(line), variant))
        except (json.JSONDecodeError, DataError) as exc:
            raise DataError(f"{path}:{number}: {exc}") from exc
    return tasks


def load_family_kg(variant: str, path: str | os.PathLike[str] | None = None) -> KnowledgeGraph:
    """familykg-{variant}.txt as a KnowledgeGraph; ``path`` defaults to ``$HOPGYM_DATA/familytool/``."""
    _check_variant(variant)
    return KnowledgeGraph.from_file(resolve_data_file(path, DATA_FOLDER, f"familykg-{variant}.txt"))


def parse_row(row: Any, variant: str) -> FamilyToolTask:
    """One JSONL row (a list of four role/content messages) as a task."""
    messages = _messages_by_role(row)
    user_text = messages["user"]
    if not isinstance(user_text, str):
        raise DataError("the user message content must be a string")
    speaker_label, speaker, rest = _split_speaker(user_text)
    marker = rest.find(EXTRA_INFO_MARKER)
    if marker < 0:
        raise DataError(f"user text lacks {EXTRA_INFO_MARKER!r}: {user_text[:80]!r}")
    extra = rest[marker + len(EXTRA_INFO_MARKER) :]
    subkg_text = extra[: extra.find(")") + 1] if ")" in extra else ""
    gold_subkg = tuple(parse_triples(subkg_text))
    if not gold_subkg:
        raise DataError(f"no golden sub-KG triples after {EXTRA_INFO_MARKER!r}: {extra[:80]!r}")
    calls = messages["tool_call"]
    if not (isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], dict)):
        raise DataError("the tool_call message must hold exactly one call")
    call = calls[0]
    if not isinstance(call.get("name"), str) or not isinstance(call.get("parameters"), dict):
        raise DataError(f"gold call needs a string 'name' and a dict 'parameters', got {call!r}")
    tools = messages["candidate_tools"]
    if not isinstance(tools, list):
        raise DataError("candidate_tools content must be a list of tool documents")
    return FamilyToolTask(
        id=str(messages["id"]),
        variant=variant,
        speaker=speaker,
        speaker_label=speaker_label,
        query=rest[:marker].strip(),
        user_text=user_text,
        gold_subkg=gold_subkg,
        subkg_quoting="python" if quotes_triples(subkg_text) else "bare",
        gold_call=FamilyToolGoldCall(
            name=call["name"], arguments=call["parameters"], depend_on=tuple(call.get("depend_on", ()))
        ),
        gold_call_text=json.dumps(calls),
        candidate_tools=tuple(normalize_tool_doc(doc) for doc in tools),
    )


def normalize_tool_doc(doc: Any) -> ToolDoc:
    """A tool document with ``parameters`` as a valid JSON-Schema object.

    Ten FamilyTool documents give ``properties`` as a list of ``{"name", "description"}`` items; they become
    a dict keyed by name, and a missing ``"type": "object"`` is added. Python type names that some documents
    use ("int", "float", "Dict") become their JSON-Schema names.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise DataError(f"a tool document must be an object with a string 'name', got {doc!r:.120}")
    parameters = dict(doc.get("parameters") or {})
    properties = parameters.get("properties", {})
    if isinstance(properties, list):
        converted = {}
        for item in properties:
            if not (isinstance(item, dict) and isinstance(item.get("name"), str)):
                raise DataError(f"tool {doc['name']!r}: list-form property without a string 'name': {item!r}")
            converted[item["name"]] = {key: value for key, value in item.items() if key != "name"}
        properties = converted
    if not isinstance(properties, dict):
        raise DataError(f"tool {doc['name']!r}: 'properties' must be an object or a list, got {properties!r}")
    parameters["properties"] = {
        name: _standard_types(schema, doc["name"]) for name, schema in properties.items()
    }
    parameters.setdefault("type", "object")
    parameters.setdefault("required", [])
    return ToolDoc(
        name=doc["name"],
        description=str(doc.get("description", "")),
        parameters=parameters,
        response=doc.get("response"),
    )


_JSON_SCHEMA_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_PYTHON_TYPE_NAMES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}


def _standard_types(schema: Any, tool: str) -> Any:
    """A property schema with Python type names replaced by JSON-Schema ones, recursively."""
    if isinstance(schema, list):
        return [_standard_types(item, tool) for item in schema]
    if not isinstance(schema, dict):
        return schema
    fixed = {key: _standard_types(value, tool) for key, value in schema.items()}
    kind = schema.get("type")
    if isinstance(kind, str) and kind not in _JSON_SCHEMA_TYPES:
        if kind.lower() not in _PYTHON_TYPE_NAMES:
            raise DataError(
                f"tool {tool!r}: unknown parameter type {kind!r}; valid: {sorted(_JSON_SCHEMA_TYPES)}"
            )
        fixed["type"] = _PYTHON_TYPE_NAMES[kind.lower()]
    return fixed


def _check_variant(variant: str) -> None:
    check_choice("FamilyTool variant", variant, VARIANTS)


def _messages_by_role(row: Any) -> dict[str, Any]:
    roles = ("id", "candidate_tools", "user", "tool_call")
    if not (isinstance(row, list) and all(isinstance(m, dict) for m in row)):
        raise DataError("a row must be a list of {'role', 'content'} messages")
    messages = {m.get("role"): m.get("content") for m in row}
    if [m.get("role") for m in row] != list(roles):
        raise DataError(f"a row must hold the messages {roles} in order, got {[m.get('role') for m in row]}")
    return messages


def _split_speaker(user_text: str) -> tuple[str | None, str | None, str]:
    """(tag label such as "Speaker"/"Person", speaker name without trailing "." or space, the rest)."""
    match = _SPEAKER_TAG.match(user_text)
    if match is None:
        return None, None, user_text
    name = match.group("name").strip().rstrip(".").strip()
    return match.group("label").strip(), name or None, user_text[match.end() :]
