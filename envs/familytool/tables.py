"""FamilyTool results in the paper's layouts: Table 3 (KG extraction) and Tables 4/5 (tool use).

Dataset values come from ``aggregate_metrics`` over the run's per-episode metrics, in the
reading the env scored with (``official`` by default), and print x100 with two decimals as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.envs.familytool.metrics import aggregate_metrics

PATH_EXTRACTION_LABELS = {"greedy": "GS", "retrieval": "RR", "exact": "Exact"}
EXTRACTION_COLUMNS = (
    ("EM", "kg_em"),
    ("F1", "kg_f1"),
    ("No-Hallucination", "kg_no_hallucination"),
    ("Coverage", "kg_coverage"),
    ("Format Error", "kg_format_error"),
)
TOOL_USE_COLUMNS = (("EM", "tool_em"), ("Tool Acc.", "tool_acc"), ("Value Acc.", "value_acc"))


def familytool_tables(metrics: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str:
    """Table 3 (when the episodes carry extraction metrics) and Table 4/5 as markdown, from each episode's
    terminal ``metrics`` and the run's ``run.json``."""
    env_kwargs = run.get("env_kwargs") or {}
    agent_options = run.get("agent_options") or {}
    episodes = ({"metrics": episode} for episode in metrics)  # what aggregate_metrics reads
    values = aggregate_metrics(episodes, env_kwargs.get("reading", "official"))
    model = str(run.get("model"))
    blocks = []
    if values.get("kg_episodes"):
        extraction = str(env_kwargs.get("extraction", "greedy"))
        label = PATH_EXTRACTION_LABELS.get(extraction, extraction)
        row = [str(agent_options.get("kg_model") or model), label, *_cells(values, EXTRACTION_COLUMNS)]
        blocks.append(
            _table(
                "Table 3 layout: KG extraction", ["LLM for KG", "Path Extraction"], EXTRACTION_COLUMNS, row
            )
        )
    row = [model, *_cells(values, TOOL_USE_COLUMNS)]
    blocks.append(_table("Tables 4/5 layout: tool use", ["LLM for Tool Use"], TOOL_USE_COLUMNS, row))
    return "\n\n".join(blocks)


def _cells(values: Mapping[str, Any], columns: Sequence[tuple[str, str]]) -> list[str]:
    return ["–" if values.get(key) is None else f"{100 * values[key]:.2f}" for _, key in columns]


def _table(title: str, leading: Sequence[str], columns: Sequence[tuple[str, str]], row: Sequence[str]) -> str:
    header = [*leading, *(name for name, _ in columns)]
    return "\n".join(
        [
            f"{title}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(leading) + "---:|" * len(columns),
            "| " + " | ".join(row) + " |",
        ]
    )
