"""The construction checks one by one: each failure is found and named so the model can fix it."""

from __future__ import annotations

import copy

import pytest

from hopgym.agents.construction.checks import (
    check_backward_compatible,
    check_document,
    check_execution,
    check_signature,
    invalid_calls,
    parse_json_reply,
    parse_proposed_call,
)
from hopgym.errors import DataError
from hopgym.sandbox import make_sandbox
from hopgym.tasks.toolhop.construction_rows import query_row

DOC = {
    "name": "year_of",
    "description": "The year an event happened.",
    "parameters": {
        "type": "object",
        "properties": {
            "event": {"type": "string", "description": "The event."},
            "calendar": {"type": "string", "enum": ["gregorian", "julian"]},
            "offset": {"type": "integer"},
        },
        "required": ["event"],
    },
}
GOOD_CODE = """def year_of(event, calendar='gregorian', offset=0):
    if not isinstance(event, str) or not event:
        return {'error': 'event must be a non-empty string'}
    if calendar not in ('gregorian', 'julian'):
        return {'error': 'calendar must be gregorian or julian'}
    if not isinstance(offset, int):
        return {'error': 'offset must be an integer'}
    return {'year': {'Moon landing': 1969}.get(event, 0) + offset}
"""


def test_json_replies_are_found_bare_fenced_or_with_echoed_html_entities() -> None:
    assert parse_json_reply('{"a": 1}') == ({"a": 1}, [])
    assert parse_json_reply('Sure:\n```json\n{"a": [1]}\n```\nDone.') == ({"a": [1]}, [])
    assert parse_json_reply("{&#34;a&#34;: &#34;x&#34;}") == ({"a": "x"}, [])
    value, failures = parse_json_reply("I would write a tool.")
    assert value is None and "not one JSON object" in failures[0]


def test_document_shape_failures_are_each_named() -> None:
    assert check_document(DOC) == []
    assert "already used" in check_document(DOC, taken_names=["year_of"])[0]
    broken = copy.deepcopy(DOC)
    broken["name"] = "year of"
    broken["parameters"]["required"] = ["when"]
    broken["parameters"]["properties"]["offset"] = {"type": "int"}
    failures = " | ".join(check_document(broken))
    assert (
        "not a Python identifier" in failures
        and "['when']" in failures
        and "not a valid JSON schema" in failures
    )
    assert "non-empty 'properties'" in check_document({**DOC, "parameters": {"type": "object"}})[0]


def test_refinement_must_stay_backward_compatible() -> None:
    refined = copy.deepcopy(DOC)
    refined["parameters"]["properties"]["format"] = {"type": "string"}
    refined["parameters"]["properties"]["offset"] = {"type": ["integer", "string"]}
    assert check_backward_compatible(DOC, refined) == []
    refined["parameters"]["required"] = ["event", "format"]
    del refined["parameters"]["properties"]["calendar"]
    refined["parameters"]["properties"]["event"] = {"type": "array"}
    failures = " | ".join(check_backward_compatible(DOC, refined))
    assert "dropped the original parameters ['calendar']" in failures
    assert "'event' allowed ['string'], now ['array']" in failures
    assert "makes ['format'] required" in failures
    narrowed = copy.deepcopy(DOC)
    narrowed["parameters"]["properties"]["calendar"]["enum"] = ["gregorian"]
    assert "lost enum values" in check_backward_compatible(DOC, narrowed)[0]


def test_signatures_must_match_the_document() -> None:
    assert check_signature(GOOD_CODE, DOC) == []
    assert "not valid Python" in check_signature("def year_of(:\n", DOC)[0]
    assert "null bytes" in check_signature("def year_of(event):\x00 pass\n", DOC)[0]
    assert "no top-level function named 'year_of'" in check_signature("def other(event): pass\n", DOC)[0]
    failures = check_signature("def year_of(event, calendar, extra=1): pass\n", DOC)
    assert (
        "but the document declares" in failures[0] and "['calendar'] of year_of need default" in failures[1]
    )


def test_invalid_calls_change_one_value_of_the_valid_call() -> None:
    calls = invalid_calls(DOC, {"event": "Moon landing"})
    assert calls == [
        ("event empty", {"event": ""}),
        ("calendar outside its enum", {"event": "Moon landing", "calendar": "__not_an_option__"}),
    ]


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as box:
        yield box


def test_execution_accepts_a_correct_tool_and_names_each_failure_of_a_bad_one(sandbox) -> None:
    call, failures = parse_proposed_call("year_of('Moon landing')", GOOD_CODE, DOC)
    assert failures == [] and call.arguments == {"event": "Moon landing"}
    assert check_execution(sandbox, GOOD_CODE, DOC, call, "1969") == []
    assert "does not contain the answer '1970'" in check_execution(sandbox, GOOD_CODE, DOC, call, "1970")[0]
    crashing = (
        "def year_of(event, calendar='gregorian', offset=0):\n"
        "    return {'year': 1969, 'n': len(event) // len(event)}\n"
    )
    failures = check_execution(sandbox, crashing, DOC, call, "1969")
    assert len(failures) == 2 and "ZeroDivisionError" in failures[0] and "__not_an_option__" in failures[1]
    hanging = (
        "def year_of(event, calendar='gregorian', offset=0):\n    while not event: pass\n    return 1969\n"
    )
    assert "failed with timeout" in check_execution(sandbox, hanging, DOC, call, "1969")[0]
    _, failures = parse_proposed_call("year_of(when='x')", GOOD_CODE, DOC)
    assert "does not match the document" in failures[0]


def test_construction_rows_need_ordered_distinct_sub_questions() -> None:
    row = query_row({"question": "q", "answer": "a", "sub_tasks": [["q1", "x"], ["q2", "a"]]}, 0)
    assert row.id == "0" and row.sub_tasks == (("q1", "x"), ("q2", "a"))
    with pytest.raises(DataError, match="distinct"):
        query_row({"question": "q", "answer": "a", "sub_tasks": [["q1", "x"], ["q1", "a"]]}, 1)
    with pytest.raises(DataError, match="needs 'sub_tasks'"):
        query_row({"question": "q", "answer": "a"}, 2)
