"""Table 4 arithmetic on hand-made episode records."""

from __future__ import annotations

import pytest

from hopgym.envs.toolhop.metrics import table4_metrics


def call(status, *extra):
    return {"status": status, "errors": [] if status == "ok" else [status, *extra]}


RECORDS = [
    # 1: correct, two clean calls
    {"correct": True, "calls": [call("ok"), call("ok")]},
    # 2: wrong, one hallucinated tool, one tool error (not an invocation error in Table 4)
    {"correct": False, "calls": [call("tool_hallucination"), call("tool_error"), call("ok")]},
    # 3: correct, one call with both parameter hallucination and parameter missing
    {"correct": True, "calls": [call("parameter_hallucination", "parameter_missing"), call("ok")]},
    # 4: wrong, no calls at all
    {"correct": False, "calls": []},
    # 5: wrong, invalid JSON and a wrong type only (not counted), one parameter missing
    {"correct": False, "calls": [call("invalid_arguments"), call("parameter_missing")]},
]


def test_table4_columns():
    m = table4_metrics(RECORDS)
    assert m["episodes"] == 5 and m["calls"] == 9
    assert m["answer_correctness"] == pytest.approx(2 / 5)
    # queries 2, 3 and 5 contain an invocation error
    assert m["invocation_error_query"] == pytest.approx(3 / 5)
    # calls: hallucinated tool, the double-error call, the missing parameter
    assert m["invocation_error_instance"] == pytest.approx(3 / 9)
    assert m["tool_hallucination_query"] == pytest.approx(1 / 5)
    assert m["tool_hallucination_instance"] == pytest.approx(1 / 9)
    assert m["parameter_hallucination_query"] == pytest.approx(1 / 5)
    assert m["parameter_hallucination_instance"] == pytest.approx(1 / 9)
    assert m["parameter_missing_query"] == pytest.approx(2 / 5)
    assert m["parameter_missing_instance"] == pytest.approx(2 / 9)


def test_empty_inputs_give_none_rates():
    m = table4_metrics([])
    assert m["episodes"] == 0 and m["answer_correctness"] is None
    no_calls = table4_metrics([{"correct": True, "calls": []}])
    assert no_calls["answer_correctness"] == 1.0
    assert no_calls["invocation_error_query"] == 0.0
    assert no_calls["invocation_error_instance"] is None


def test_status_alone_counts_when_errors_is_missing():
    m = table4_metrics([{"correct": False, "calls": [{"status": "parameter_missing"}]}])
    assert m["parameter_missing_instance"] == 1.0
