"""Call classification against real ToolHop schemas, and the feedback texts."""

from __future__ import annotations

import json

import pytest

from hopgym.envs.feedback import MINIMAL_HINT, is_error_value, outcome_of, shown_text
from hopgym.envs.validation import ToolValidator
from hopgym.sandbox.base import CallResult
from hopgym.tasks.toolhop.loader import load_toolhop
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "toolhop" / "official_sample.json"


@pytest.fixture(scope="module")
def validator():
    task = load_toolhop(FIXTURE)[0]
    return ToolValidator(task.tools)


def test_valid_call_accepts_json_string_and_dict(validator):
    for arguments in ('{"text": "abc"}', {"text": "abc"}):
        check = validator.check("reverse_text", arguments)
        assert check.ok and check.status == "ok" and check.arguments == {"text": "abc"}


@pytest.mark.parametrize(
    ("name", "arguments", "errors"),
    [
        ("reverse_everything", {"text": "a"}, ["tool_hallucination"]),
        ("reverse_everything", "{oops", ["tool_hallucination", "invalid_arguments"]),
        ("reverse_text", "{oops", ["invalid_arguments"]),
        ("reverse_text", "[1, 2]", ["invalid_arguments"]),
        ("reverse_text", {"text": "a", "lang": "en"}, ["parameter_hallucination"]),
        ("reverse_text", {}, ["parameter_missing"]),
        ("reverse_text", {"lang": "en"}, ["parameter_hallucination", "parameter_missing"]),
        ("reverse_text", {"text": 5}, ["invalid_arguments"]),
        ("name_part", {"name": 5, "extra": 1}, ["parameter_hallucination", "invalid_arguments"]),
        ("name_part", {"upper": "yes"}, ["parameter_missing", "invalid_arguments"]),
        (None, {}, ["tool_hallucination"]),
    ],
)
def test_classification_order_and_all_errors(validator, name, arguments, errors):
    check = validator.check(name, arguments)
    assert list(check.errors) == errors
    assert check.status == errors[0]
    assert len(check.messages) >= len(errors)


def test_enum_violation_is_invalid_arguments():
    subset_like = [
        {
            "type": "function",
            "function": {
                "name": "pick",
                "description": "",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "mode": {"type": "string", "enum": ["a", "b"]},
                        "n": {"type": ["integer", "array"]},
                    },
                    "required": ["mode"],
                },
            },
        }
    ]
    v = ToolValidator(subset_like)
    check = v.check("pick", {"mode": "c"})
    assert check.errors == ("invalid_arguments",)
    assert "'c' is not one of ['a', 'b']" in check.messages[0]
    assert v.check("pick", {"mode": "a", "n": [1]}).ok and v.check("pick", {"mode": "a", "n": 2}).ok
    assert v.check("pick", {"mode": "a", "n": "2"}).errors == ("invalid_arguments",)


def test_messages_name_the_problem(validator):
    assert "available tools: reverse_text, name_part" in validator.check("nope", {}).messages[0]
    assert "valid parameters: text" in validator.check("reverse_text", {"x": 1, "text": "a"}).messages[0]
    assert "'text'" in validator.check("reverse_text", {}).messages[0]
    assert "not valid JSON" in validator.check("reverse_text", "{").messages[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"error": "The individual_name parameter is required."}, True),
        ({"result": "x", "error": None}, True),
        ("Error: Invalid input. Please provide a string.", True),
        ("error: bad", True),
        ("  ERROR - bad", True),
        ("No data found for the specified query.", False),
        ("Errors in history books", False),
        ({"result": "error"}, False),
        (15, False),
        (["error"], False),
    ],
)
def test_error_value_rule(value, expected):
    assert is_error_value(value) is expected


def test_outcomes_and_feedback_modes():
    ok = outcome_of(CallResult(status="ok", value={"first_name": "Oliver"}))
    assert ok == ("ok", json.dumps({"first_name": "Oliver"}))
    returned = outcome_of(CallResult(status="ok", value={"error": "name required"}))
    assert returned == ("tool_error", '{"error": "name required"}')
    raised = outcome_of(CallResult(status="error", error="KeyError: 'x'"))
    assert raised == ("tool_error", "Error: KeyError: 'x'")
    assert outcome_of(CallResult(status="timeout", error="killed after 5.0 s"))[0] == "timeout"
    assert outcome_of(CallResult(status="resource_limit", error="memory"))[0] == "resource_limit"
    assert shown_text("ok", "Oliver", "minimal") == "Oliver"
    assert shown_text("tool_error", "Error: KeyError: 'x'", "minimal") == MINIMAL_HINT
    assert shown_text("tool_error", "Error: KeyError: 'x'", "detailed") == "Error: KeyError: 'x'"
