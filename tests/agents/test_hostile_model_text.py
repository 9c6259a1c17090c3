"""Model text is hostile input (issue 25): a lone surrogate in a reply costs at most its character, never the
run; every parser of model text is linear, attacked the way each super-linear pattern was found, with a
1 MB reply and a 1 s bound (each parses in about 10 ms here: a 100x margin); and each rewritten parser
still means what the old pattern meant, checked against that pattern on random short texts."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hopgym.agents.construction.checks import parse_json_reply
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.agents.policies.kgetool.replies import parse_hermes_tool_calls
from hopgym.agents.policies.react import _first_json_object, parse_react
from hopgym.agents.policies.text_calls import _json_values, parse_text_tool_calls, tagged_segments
from hopgym.envs.kgtool.scoring import _FENCE, parse_answer_names
from hopgym.model_text import (
    MAX_JSON_DEPTH,
    MAX_PARSED_CHARS,
    SPACE,
    SPACE_CHARACTERS,
    linear,
    nested_deeper,
    valid_unicode,
)
from hopgym.tasks.familytool import extraction
from hopgym.tasks.familytool.extraction import parse_search_calls
from hopgym.tasks.kg2tool.query_prompt import parse_translation

MB = 2**20
BOUND_S = 1.0


def filled(unit: str, size: int = MB) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def timed(parse: Callable[[str], Any], text: str) -> float:
    """CPU seconds ``parse`` takes on ``text``: on shared cores wall time measures the neighbours."""
    started = time.process_time()
    parse(text)
    return time.process_time() - started


# -- a lone surrogate ends at most its episode ---------------------------------------------------------


def surrogate_policy(request: dict[str, Any]) -> ScriptedReply:
    """Every reply carries lone surrogates (as ``\\udXXX`` escapes in the JSON body): first a tool call whose
    name and id hold one, then a final answer whose content and reasoning hold one."""
    if not any(message["role"] == "tool" for message in request["messages"]):
        tools = request.get("tools") or [{"function": {"name": "none"}}]
        call = {
            "id": "call_\ud800",
            "type": "function",
            "function": {"name": tools[0]["function"]["name"] + "\udc00", "arguments": '{"a": "\\ud800"}'},
        }
        message = {"role": "assistant", "content": "thinking \udfff", "tool_calls": [call]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "the answer \ud800", "reasoning_content": "\udbff"}
        finish = "stop"
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return ScriptedReply(raw_body=json.dumps(body))  # ensure_ascii: the surrogates travel as escapes


def test_lone_surrogates_in_replies_are_replaced_and_every_episode_is_recorded(tmp_path: Path) -> None:
    """Found: a lone surrogate in a reply's content, tool name or call id ended the whole ``hopgym eval``
    run with no episode recorded (the record could not be written as UTF-8), and ``--resume`` crashed
    the same way."""
    out = tmp_path / "run"
    with ScriptedModelServer(surrogate_policy) as server:
        command = [
            sys.executable, "-m", "hopgym.cli", "eval", "--model", server.model, "--api-base",
            server.api_base, "--api-key", "sk", "--limit", "3", "--concurrency", "2",
            "--max-retries", "0", "--out", str(out), "--no-progress",
        ]  # fmt: skip
        first = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        assert "Traceback" not in first.stderr
        resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
    lines = (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(record["index"] for record in records) == [0, 1, 2]
    for record in records:
        assert record["error"] is None
        text = json.dumps(record["messages"], ensure_ascii=False)
        assert "\ufffd" in text
        text.encode("utf-8")  # no lone surrogate is left anywhere in the conversation
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 0


def test_valid_unicode_replaces_lone_surrogates_in_keys_and_values_and_keeps_clean_data() -> None:
    dirty = {"a\ud800": ["x\udc00", ("y",), {"b": None, "c": 1}], "d": "é"}
    assert valid_unicode(dirty) == {"a\ufffd": ["x\ufffd", ("y",), {"b": None, "c": 1}], "d": "é"}
    clean = {"a": [{"b": "é"}, 1.5]}
    assert valid_unicode(clean) is clean
    nested: list[Any] = ["\ud800"]
    for _ in range(50_000):  # deeper than any recursion limit
        nested = [nested]
    innermost = valid_unicode(nested)
    for _ in range(50_000):
        innermost = innermost[0]
    assert innermost == ["\ufffd"]


# -- ReDoS: each finding attacked the way it was found, at 1 MB ----------------------------------------


def test_react_action_with_newlines_parses_in_linear_time() -> None:
    """Found: "Action: search" and newlines took cubic time (1.7 KB ~10 s, 8 KB ~20 min)."""
    assert timed(parse_react, "Action: search" + "\n" * MB) < BOUND_S
    assert timed(parse_react, filled("Action: search\n\n")) < BOUND_S
    assert timed(parse_react, "Action: a\nAction Input:" + filled(" \n") + "x") < BOUND_S


def test_text_tool_calls_tags_and_brackets_parse_in_linear_time() -> None:
    """Found: ``<tool_call>`` bodies with whitespace runs and JSON retried from every ``{``/``[`` took
    quadratic time (36 KB ~11 s, 200 KB ~5 min); nesting past the stack raised RecursionError."""
    attacks = [
        "<tool_call>x" + "\n" * MB + "y",
        filled("<tool_call>" + " " * 100 + "x"),
        filled("{"),
        filled("["),
        filled('{"a":'),
        filled("[1,"),
        filled("[x"),
        filled('["'),
        filled("{}"),
        "[" + "9" * MB + "]",  # an integer past the digit limit: ValueError before
    ]
    for text in attacks:
        assert timed(parse_text_tool_calls, text) < BOUND_S, text[:40]


def test_text_tool_calls_still_read_many_calls_and_skip_what_is_not_json() -> None:
    call = '{"name": "f", "arguments": {"a": 1}}'
    calls = parse_text_tool_calls(f"[[[ {call} ] oops {call} {{{{ {call}")
    assert [c["function"]["arguments"] for c in calls] == ['{"a": 1}'] * 3
    assert len(parse_text_tool_calls("\n".join([call] * 500))) == 500
    deep = parse_text_tool_calls("[" * 5000 + call)  # too deep to be JSON: the call inside still counts
    assert [c["function"] for c in deep] == [{"name": "f", "arguments": '{"a": 1}'}]


def test_kgtool_fenced_answer_parses_in_linear_time() -> None:
    """Found: a 3.3 KB fenced final answer of newlines stalled ``env.step`` ~18 s (cubic)."""
    assert timed(parse_answer_names, "```\n" + "\n" * MB + "x") < BOUND_S
    assert timed(parse_answer_names, "```json\n" + filled("\n \n") + "```x") < BOUND_S
    assert parse_answer_names("```json\n" + "\n" * 10_000 + '["a", "b"]\n```') == ["a", "b"]


def test_kg_search_extraction_parses_in_linear_time() -> None:
    """Found with this issue's audit: "KG.search(" without ")" (quadratic, 40 KB ~80 s), "<" without ">"
    and "path=[" without "]" in one call."""
    attacks = [filled("KG.search("), "KG.search(" + filled("<") + ")", "KG.search(" + filled("path=[") + ")"]
    for text in attacks:
        assert timed(parse_search_calls, text) < BOUND_S, text[:40]


def test_construction_replies_parse_in_linear_time_and_never_raise() -> None:
    """Found in review: ``hopgym construct``'s JSON reply (a fence and a run of spaces: quadratic, 20 KB
    ~9 s) and the KG2Tool query translation (``{`` repeated: quadratic) read model text with backtracking
    patterns, and an integer past the digit limit or deep nesting raised out of them."""
    for parse in (parse_json_reply, lambda text: parse_translation(text, [])):
        for text in ("```" + " " * MB, "```json" + filled("\n "), filled("{"), filled("}{")):
            assert timed(parse, text) < BOUND_S, text[:40]
        for text in ("{" * 100_000, '{"a": ' + "9" * 10_000 + "}"):
            assert parse(text)[0] is None
    assert parse_json_reply("```json\n" + " " * 10_000 + '{"a": 1}```') == ({"a": 1}, [])
    assert parse_json_reply('{"tool": {"name": "\\ud800"}}') == ({"tool": {"name": "\ufffd"}}, [])
    assert parse_translation('x {"Natural Language Question": "Who is A?"} y', ["A"]) == ("Who is A?", "")


def test_hermes_blocks_with_deep_or_huge_json_lose_the_reply_not_the_episode() -> None:
    for text in ["<tool_call>" + "[" * 100_000, "<tool_call>[" + "9" * 10_000 + "]"]:
        assert parse_hermes_tool_calls(text) == []
    assert _first_json_object("{" * 100_000, default="raw") == "raw"


def test_nesting_past_the_depth_limit_is_found_in_strings_too_and_stray_closers_do_not_hide_it() -> None:
    """The bound a training reply must keep (agents/model/reply_parser.py): open brackets, quoted or not,
    anywhere in the text, even after a MiB of balanced ones; a closer with nothing open lowers nothing."""
    limit = MAX_JSON_DEPTH
    assert not nested_deeper("[" * limit) and nested_deeper("[" * (limit + 1))
    assert nested_deeper('{"a": "' + "{" * (limit + 1) + '"}')
    assert not nested_deeper("]" * 500 + "[" * limit + "}" * 5 + "{" * 5)
    assert nested_deeper("]" * 500 + "[" * limit + "}" * 5 + "{" * 6)
    assert not nested_deeper(filled("[]")) and nested_deeper(filled("[]") + "{" * (limit + 1))
    assert nested_deeper("[" * 3, limit=2) and not nested_deeper("[[]][[]]", limit=2)


def test_parsers_read_only_the_first_mib() -> None:
    call = '{"name": "f", "arguments": {}}'
    assert parse_text_tool_calls(" " * MAX_PARSED_CHARS + call) == []
    assert parse_react("x" * MAX_PARSED_CHARS + "Final Answer: 1") is None


# -- the rewritten parsers mean what the old patterns meant --------------------------------------------

OLD_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
OLD_ACTION = re.compile(
    r"Action\s*:\s*(?P<name>[^\n]*?)\s*\n+\s*Action\s*Input\s*:\s*(?P<input>.*)", re.DOTALL
)
OLD_FINAL = re.compile(r"Final\s*Answer\s*:\s*(?P<answer>.*)", re.DOTALL)
OLD_KG_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)
OLD_CALL, OLD_START = re.compile(r"KG.search\((.*?)\)"), re.compile(r"start=([^,]+)")
OLD_PATH, OLD_TAG = re.compile(r"path=\[([^\]]+)\]"), re.compile(r"<.*?>")
PIECES = [
    "{", "}", "[", "]", '"', "\\", ":", ",", " ", "\n", "\t", "\u3000", "\x0b", "\x1c", "\u2028", "1", "-",
    "e", "x", "é", "null", "NaN", '"name"', '"a\\"b"', "\\ud800", '{"name": "f", "arguments": {}}',
    "<tool_call>", "</tool_call>", "```", "json", "Action", "Action:", "Action Input:", "Input", "Final",
    "Final Answer:", "Observation:", "KG.search(", "KG_search(", "(", ")", "start=", "path=[", "<", ">",
    "'", "Alice", "\u5168\u90e8", "\uff0c", "\u3010", "\u3011",
]  # fmt: skip


def old_json_values(text: str) -> list[Any]:
    decoder, values, position = json.JSONDecoder(), [], 0
    while True:
        starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
        if not starts:
            return values
        try:
            value, end = decoder.raw_decode(text, min(starts))
        except json.JSONDecodeError:
            position = min(starts) + 1
            continue
        values.append(value)
        position = end


def old_react(text: str) -> tuple[str, Any] | None:
    action, final = OLD_ACTION.search(text), OLD_FINAL.search(text)
    if action and (not final or action.start() < final.start()):
        raw_input = re.split(r"\n\s*Observation\s*:", action["input"])[0].strip()
        return "call", (
            action["name"].strip().strip("`'\""),
            _first_json_object(raw_input, default=raw_input),
        )
    return ("final", final["answer"].strip()) if final else None


def old_search_calls(text: str) -> list[extraction.SearchCall]:
    calls = []
    for raw in OLD_CALL.findall(text):
        cleaned = OLD_TAG.sub("", raw.translate(extraction._DELETED).translate(extraction._FULL_WIDTH))
        start, path = OLD_START.search(cleaned), OLD_PATH.search(cleaned)
        items = extraction.glue_all_relations([i.strip() for i in path.group(1).split(",")]) if path else None
        calls.append(extraction.SearchCall(raw, start.group(1).strip() if start else None, items))
    return calls


def test_rewritten_parsers_agree_with_the_old_patterns_on_random_texts() -> None:
    rng = random.Random(25)
    for _ in range(4000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 24)))
        assert tagged_segments(text) == OLD_TAGGED.findall(text), text
        assert repr(_json_values(text)) == repr(old_json_values(text)), text
        assert parse_react(text) == old_react(text), text
        assert parse_search_calls(text) == old_search_calls(text), text
        old_fence, new_fence = OLD_KG_FENCE.match(text.strip()), _FENCE.match(text.strip())
        assert (old_fence and old_fence.group(1)) == (new_fence and new_fence.group(1)), text


def test_an_action_of_shared_sub_objects_is_checked_in_linear_time() -> None:
    """2**60 paths through 60 shared lists (an in-process action can be such a graph): each list is looked
    at once, so the check ends at once instead of never."""
    nested: list[Any] = ["ok"]
    for _ in range(60):
        nested = [nested, nested]
    started = time.process_time()
    assert valid_unicode({"content": nested}) == {"content": nested}
    assert time.process_time() - started < 1.0


def test_the_space_class_matches_what_python_s_backslash_s_matches() -> None:
    """hopgym's RE2 patterns write Python's ``\\s`` as SPACE, from a list written out: it must be exactly the
    characters this Python's ``str.isspace`` and ``re``'s ``\\s`` accept, no more and no fewer."""
    every = "".join(chr(code) for code in range(sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)
    python_spaces = "".join(character for character in every if character.isspace())
    assert SPACE_CHARACTERS == python_spaces == "".join(re.findall(r"\s", every))
    assert "".join(linear(SPACE).findall(every)) == python_spaces
