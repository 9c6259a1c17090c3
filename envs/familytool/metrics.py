"""FamilyTool's metrics: KG extraction (EM, F1, No-Hallucination, Coverage, Format Error) and tool use
(EM, Tool Acc, Value Acc), per episode and over a dataset.

``reading="official"`` (default) reproduces the official code (KGETool + UnifiedToolHub strict mode; the
extraction quirks are listed in :mod:`hopgym.tasks.familytool.extraction`) so numbers compare with the paper's
tables; ``reading="paper"`` follows the paper's prose where it differs: Value Acc counts each gold parameter
as one sample (micro average over the dataset), No-Hallucination counts relation paths (micro average over
paths), and Format Error is a query without any usable ``KG.search`` call (a known start and a path),
whatever the extraction produced.
Per-episode values are fractions in [0, 1]; dataset values are fractions too (tables print x100).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hopgym.envs.validation import parse_arguments
from hopgym.tasks.familytool.dataset import FamilyToolGoldCall, FamilyToolTask
from hopgym.tasks.familytool.extraction import BAD_EXTRACT, check_reading
from hopgym.tasks.kg.triples import Triple

TOOL_KEYS = ("tool_em", "tool_acc", "value_acc")
KG_KEYS = ("kg_em", "kg_f1", "kg_no_hallucination", "kg_coverage", "kg_format_error")


# -- tool use -------------------------------------------------------------------------------------------


def predicted_calls(tool_calls: Sequence[Any]) -> list[dict[str, Any]]:
    """``{"name", "arguments"}`` for every call of the scored message; ``[]`` when any call is malformed
    (no name, or arguments that are not a JSON object), since the official parser then loses every call."""
    calls = []
    for call in tool_calls:
        if not isinstance(call, Mapping):
            return []
        inner = call.get("function")
        function: Mapping[str, Any] = inner if isinstance(inner, Mapping) else call
        name = function.get("name")
        arguments, problem = parse_arguments(function.get("arguments"))
        if not isinstance(name, str) or problem is not None or "parameters" in function:
            return []
        calls.append({"name": name, "arguments": arguments})
    return calls


def _same_value(predicted: Any, gold: Any) -> bool:
    """Values compare by ``json.dumps``: type-, key-order- and whitespace-sensitive, as officially."""
    return json.dumps(predicted) == json.dumps(gold)


def tool_use_metrics(
    calls: Sequence[Mapping[str, Any]], gold: FamilyToolGoldCall, reading: str = "official"
) -> dict[str, Any]:
    """EM, Tool Acc and Value Acc of one episode's predicted calls against its one gold call.

    EM: among calls to the gold tool, the one whose ``json.dumps`` sorts first matches every gold parameter
    (extra parameters and other calls are ignored). Tool Acc: the gold tool is among the calls. Value Acc:
    the share of gold parameters matched by that call, 0 when the tool is missing. ``counts`` holds
    ``value_matched`` and ``value_total``: integers the paper reading sums over the dataset, not means.
    """
    check_reading(reading)
    candidates = sorted((c for c in calls if c["name"] == gold.name), key=json.dumps)
    chosen = candidates[0]["arguments"] if candidates else None
    total = len(gold.arguments)
    matched = 0
    if chosen is not None:
        matched = sum(
            key in chosen and _same_value(chosen[key], value) for key, value in gold.arguments.items()
        )
    tool_found = chosen is not None
    return {
        "tool_em": float(tool_found and matched == total),
        "tool_acc": float(tool_found),
        "value_acc": (matched / total if total else float(tool_found)) if tool_found else 0.0,
        "counts": {"value_matched": matched, "value_total": total},
    }


# -- KG extraction --------------------------------------------------------------------------------------


def extraction_metrics(
    task: FamilyToolTask,
    result_text: str,
    triples: Iterable[Triple],
    path_clean: Sequence[bool] = (),
    usable_calls: int = 0,
    reading: str = "official",
) -> dict[str, Any]:
    """Extraction metrics of one episode.

    ``result_text`` is the rendered extraction (markers included, ``""`` when nothing was extracted),
    ``triples`` the extracted triples; ``path_clean`` says for each ``KG.search`` call whether its relations
    all exist (paper No-Hallucination) and ``usable_calls`` how many calls had a known start and a path
    (paper Format Error). ``kg_no_hallucination`` is None on a format error (not in the denominator).
    """
    check_reading(reading)
    predicted = set(triples)
    gold = set(task.gold_subkg)
    common = len(predicted & gold)
    precision = common / len(predicted) if predicted else 0.0
    recall = common / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if common else 0.0
    extracted_entities = {entity for head, _, tail in predicted for entity in (head, tail)}
    used = task.used_gold_entities
    if reading == "official":
        format_error = result_text == ""
        clean_paths, paths = (0, 0) if format_error else (int(BAD_EXTRACT not in result_text), 1)
    else:
        format_error = usable_calls == 0
        clean_paths, paths = (0, 0) if format_error else (sum(path_clean), len(path_clean))
    return {
        "kg_em": float(predicted == gold),
        "kg_f1": f1,
        "kg_no_hallucination": None if format_error or not paths else clean_paths / paths,
        "kg_coverage": float(all(entity in extracted_entities for entity in used)),
        "kg_format_error": float(format_error),
        "counts": {"kg_clean_paths": clean_paths, "kg_paths": paths},
    }


# -- dataset values -------------------------------------------------------------------------------------


def aggregate_metrics(records: Iterable[Mapping[str, Any]], reading: str = "official") -> dict[str, Any]:
    """Dataset values from episode records (each with ``metrics``: an env's ``info["metrics"]``).

    Official reading: every key is the mean over the episodes that have it (sums in row order divided by
    the count); ``kg_no_hallucination`` skips format errors (None). Paper reading: ``value_acc`` and
    ``kg_no_hallucination`` are micro averages over gold parameters and relation paths. Keys no episode
    has are left out; ``episodes`` counts the records, ``kg_episodes`` those with extraction metrics.
    """
    check_reading(reading)
    metrics = [record.get("metrics") or {} for record in records]
    summary: dict[str, Any] = {"episodes": len(metrics), "kg_episodes": sum("kg_em" in m for m in metrics)}
    for key in (*TOOL_KEYS, *KG_KEYS):
        values = [m[key] for m in metrics if m.get(key) is not None]
        if values:
            summary[key] = sum(values) / len(values)
    if reading == "paper":
        for key, numerator, denominator in (
            ("value_acc", "value_matched", "value_total"),
            ("kg_no_hallucination", "kg_clean_paths", "kg_paths"),
        ):
            counts = [m.get("counts") or {} for m in metrics]
            total = sum(c.get(denominator) or 0 for c in counts)
            if total:
                summary[key] = sum(c.get(numerator) or 0 for c in counts) / total
    return summary
