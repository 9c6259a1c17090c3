"""The scorer of hopgym's Inspect tasks: the env's official score and the columns ``hopgym eval`` reports."""

from __future__ import annotations

from collections.abc import Sequence

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer
from inspect_ai.solver import TaskState

from hopgym.agents.evaluation.records import EpisodeRecord
from hopgym.agents.evaluation.summary import episode_values
from hopgym.inspect.solver import EPISODE

NOT_APPLICABLE = float("nan")
"""What Inspect leaves out of a column's mean, as hopgym's summary leaves out a metric an env reports as
None (not applicable)."""


@scorer(metrics={"*": [mean()]})
def hopgym_score(columns: Sequence[str] = ()) -> Scorer:
    """Per sample: ``reward`` (the env's official score), the per-episode values behind ``hopgym eval``'s
    summary (answer correctness, ToolHop's query-level invocation error columns, parallel calls, turns,
    calls; :func:`episode_values`), and the env's paper ``columns`` from its terminal ``info["metrics"]``;
    their means are the run's figures. A sample whose episode never ran is unscored (NaN)."""

    async def score(state: TaskState, target: Target) -> Score:
        stored = state.store.get(EPISODE)
        if stored is None:
            return Score(value=NOT_APPLICABLE, explanation="the episode did not run")
        record = EpisodeRecord.from_json(stored)
        values = episode_values(record)
        paper = {key: values.get(key, NOT_APPLICABLE) for key in columns}
        common = {key: value for key, value in values.items() if key not in (record.metrics or {})}
        return Score(
            value={"reward": float(record.reward or 0.0), **common, **paper},
            answer=None if record.final_answer is None else str(record.final_answer),
            explanation=f"gold: {target.text}; terminated={record.terminated}, truncated={record.truncated}",
        )

    return score
