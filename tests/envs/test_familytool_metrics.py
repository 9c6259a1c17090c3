"""FamilyTool metric arithmetic on hand-computed cases (rules from docs/familytool-metrics.md)."""

from __future__ import annotations

import json

import pytest

from hopgym.envs.familytool.metrics import (
    aggregate_metrics,
    extraction_metrics,
    predicted_calls,
    tool_use_metrics,
)
from hopgym.errors import ConfigError
from hopgym.tasks.familytool.dataset import FamilyToolGoldCall, load_familytool

GOLD = FamilyToolGoldCall(
    "BookAppointment", {"name_store": "appointment_with_0007", "time_appt": "appointment_time_0007"}
)


def call(name, arguments):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": text}}


def scored(*calls, gold=GOLD, reading="official"):
    return tool_use_metrics(predicted_calls(list(calls)), gold, reading)


def values(metrics):
    return (metrics["tool_em"], metrics["tool_acc"], metrics["value_acc"])


# -- tool use ----------------------------------------------------------------------------------------------


def test_exact_call_with_an_extra_parameter_is_an_exact_match():
    metrics = scored(call("BookAppointment", {**GOLD.arguments, "note": "extra"}))
    assert values(metrics) == (1.0, 1.0, 1.0)
    assert metrics["counts"] == {"value_matched": 2, "value_total": 2}


def test_one_wrong_and_one_missing_parameter():
    wrong = scored(call("BookAppointment", {**GOLD.arguments, "time_appt": "appointment_time_0001"}))
    assert values(wrong) == (0.0, 1.0, 0.5)
    missing = scored(call("BookAppointment", {"name_store": "appointment_with_0007"}))
    assert values(missing) == (0.0, 1.0, 0.5)


def test_values_compare_by_json_text_so_types_matter():
    gold = FamilyToolGoldCall("SetAlarm", {"hour": 7})
    assert values(scored(call("SetAlarm", {"hour": "7"}), gold=gold)) == (0.0, 1.0, 0.0)
    assert values(scored(call("SetAlarm", {"hour": 7.0}), gold=gold)) == (0.0, 1.0, 0.0)
    assert values(scored(call("SetAlarm", {"hour": 7}), gold=gold)) == (1.0, 1.0, 1.0)


def test_wrong_tool_scores_zero_on_every_tool_metric():
    assert values(scored(call("CancelAppointment", GOLD.arguments))) == (0.0, 0.0, 0.0)
    assert values(scored()) == (0.0, 0.0, 0.0)


def test_surplus_calls_are_ignored_and_the_first_by_json_text_is_compared():
    right = call("BookAppointment", GOLD.arguments)
    assert values(scored(call("Other", {}), right, call("BookAppointment", {"name_store": "z"}))) == (1, 1, 1)
    # '{"name_store": "0"...' sorts before '{"name_store": "appointment...' so the wrong call is compared.
    earlier_wrong = call("BookAppointment", {"name_store": "0", "time_appt": "appointment_time_0007"})
    assert values(scored(right, earlier_wrong)) == (0.0, 1.0, 0.5)


def test_one_malformed_call_loses_every_call():
    right = call("BookAppointment", GOLD.arguments)
    assert values(scored(right, call("Other", "{not json"))) == (0.0, 0.0, 0.0)
    with_parameters = {"name": "BookAppointment", "parameters": dict(GOLD.arguments)}
    assert values(scored(right, with_parameters)) == (0.0, 0.0, 0.0)


# -- KG extraction (row KGMTUbench_0 of -e: Jack -father-> William -prefer_pickup_location-> ...) -------


@pytest.fixture(scope="module")
def row():
    return next(t for t in load_familytool("e") if t.id == "KGMTUbench_0")


def render(triples, bad=False):
    return f"({[list(t) for t in triples]})" + ("<bad_extract>" if bad else "")


def kg_values(metrics):
    keys = ("kg_em", "kg_f1", "kg_no_hallucination", "kg_coverage", "kg_format_error")
    return tuple(metrics[key] for key in keys)


def test_gold_extraction_scores_full_marks(row):
    gold = row.gold_subkg
    assert kg_values(extraction_metrics(row, render(gold), gold, [True], 1)) == (1.0, 1.0, 1.0, 1.0, 0.0)


def test_partial_path_misses_the_used_entity(row):
    first = row.gold_subkg[:1]
    em, f1, no_hallucination, coverage, format_error = kg_values(
        extraction_metrics(row, render(first), first)
    )
    assert (em, no_hallucination, coverage, format_error) == (0.0, 1.0, 0.0, 0.0)
    assert f1 == pytest.approx(2 / 3)  # precision 1, recall 1/2


def test_hallucinated_relation_with_extra_triples(row):
    extracted = [*row.gold_subkg, ("William", "prefer_coffee", "coffee_0007")]
    metrics = extraction_metrics(row, render(extracted, bad=True), extracted, [False], 1)
    em, f1, no_hallucination, coverage, format_error = kg_values(metrics)
    assert (em, no_hallucination, coverage, format_error) == (0.0, 0.0, 1.0, 0.0)
    assert f1 == pytest.approx(0.8)  # precision 2/3, recall 1


def test_format_error_has_no_hallucination_value_and_coverage_needs_used_entities(row):
    assert kg_values(extraction_metrics(row, "", ())) == (0.0, 0.0, None, 0.0, 1.0)
    unused = next(t for t in load_familytool("b") if t.id == "KGMTUbench_301")  # its call uses no gold entity
    assert not unused.used_gold_entities
    assert extraction_metrics(unused, "", ())["kg_coverage"] == 1.0


def test_paper_reading_counts_paths_and_usable_calls(row):
    gold = row.gold_subkg
    text = render(gold) + "<bad_extract>"  # one clean path, one call with a made-up relation
    official = extraction_metrics(row, text, gold, [True, False], 2, reading="official")
    paper = extraction_metrics(row, text, gold, [True, False], 2, reading="paper")
    assert official["kg_no_hallucination"] == 0.0
    assert paper["kg_no_hallucination"] == 0.5
    assert paper["counts"] == {"kg_clean_paths": 1, "kg_paths": 2}
    malformed_only = extraction_metrics(row, "<bad_extract>", (), [False], 0, reading="paper")
    assert malformed_only["kg_format_error"] == 1.0
    assert extraction_metrics(row, "<bad_extract>", (), [False], 0)["kg_format_error"] == 0.0


# -- dataset values ----------------------------------------------------------------------------------------


def test_aggregation_official_means_and_paper_micro_averages(row):
    one_of_two = scored(call("BookAppointment", {"name_store": "appointment_with_0007"}))
    single = tool_use_metrics(
        [{"name": "SetAlarm", "arguments": {"hour": 7}}], FamilyToolGoldCall("SetAlarm", {"hour": 7})
    )
    format_error = extraction_metrics(row, "", ())
    clean = extraction_metrics(row, render(row.gold_subkg), row.gold_subkg, [True, True, False], 3)
    records = [
        {
            "metrics": {
                **one_of_two,
                **format_error,
                "counts": {**one_of_two["counts"], **format_error["counts"]},
            }
        },
        {"metrics": {**single, **clean, "counts": {**single["counts"], **clean["counts"]}}},
    ]
    official = aggregate_metrics(records)
    assert official["value_acc"] == pytest.approx(0.75)  # (1/2 + 1) / 2
    assert official["tool_em"] == 0.5
    assert official["kg_no_hallucination"] == 1.0  # the format error is left out
    assert official["kg_format_error"] == 0.5
    paper = aggregate_metrics(
        [
            {
                "metrics": {
                    **r["metrics"],
                    "counts": {**r["metrics"]["counts"], "kg_paths": 3, "kg_clean_paths": 2},
                }
            }
            for r in records[1:]
        ]
        + records[:1],
        reading="paper",
    )
    assert paper["value_acc"] == pytest.approx(2 / 3)  # (1 + 1) / (2 + 1) gold parameters
    assert paper["kg_no_hallucination"] == pytest.approx(2 / 3)
    assert aggregate_metrics([])["episodes"] == 0


def test_unknown_reading_is_rejected():
    with pytest.raises(ConfigError, match="official, paper"):
        tool_use_metrics([], GOLD, reading="prose")
