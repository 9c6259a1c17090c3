"""FamilyTool results in the paper's layouts: Table 3 (KG extraction) and Tables 4/5 (tool use).

Dataset values come from the env layer's ``aggregate_metrics`` over the run's episode records, in the
reading the env scored with (``official`` by default), and print x100 with two decimals as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.records import EPISODES_FILE, RUN_FILE, EpisodeRecord, read_episodes
from hopgym.agents.evaluation.run_folder import read_json
from hopgym.envs.env_options import env_class
from hopgym.envs.familytool.env import FamilyToolEnv
from hopgym.envs.familytool.metrics import aggregate_metrics
from hopgym.errors import ConfigError

PATH_EXTRACTION_LABELS = {"greedy": "GS", "retrieval": "RR", "exact": "Exact"}
EXTRACTION_COLUMNS = (
    ("EM", "kg_em"),
    ("F1", "kg_f1"),
    ("No-Hallucination", "kg_no_hallucination"),
    ("Coverage", "kg_coverage"),
    ("Format Error", "kg_format_error"),
)
TOOL_USE_COLUMNS = (("EM", "tool_em"), ("Tool Acc.", "tool_acc"), ("Value Acc.", "value_acc"))


def familytool_tables(records: Sequence[EpisodeRecord], run: Mapping[str, Any]) -> str:
    """Table 3 (when the episodes carry extraction metrics) and Table 4/5 as markdown."""
    env_kwargs = run.get("env_kwargs") or {}
    agent_options = run.get("agent_options") or {}
    metrics = ({"metrics": record.metrics} for record in records)  # what aggregate_metrics reads
    values = aggregate_metrics(metrics, env_kwargs.get("reading", "official"))
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


def familytool_tables_for_run(out: Path) -> str | None:
    """The tables of a finished run folder, or None when the run is not on FamilyTool-v0."""
    run = read_json(Path(out) / RUN_FILE)
    if run is None:
        return None
    try:
        if not issubclass(env_class(str(run.get("env"))), FamilyToolEnv):
            return None
    except ConfigError:  # a run of an env hopgym no longer registers
        return None
    return familytool_tables(read_episodes(Path(out) / EPISODES_FILE), run)


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
