"""The fc agent on FamilyTool-v0 with the generated KG tools (kg="tools"), end to end through the runner
with a scripted model server: the model's KG call runs in the sandbox against the live family KG, its
result reaches the model, and the candidate call it then makes is scored.

Row KGMTUbench_0 of familytool-e (speaker Jack): the gold call is SearchHouse(where_to=...) at the pickup
location Jack's father William prefers (pickup_location_0007).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call

WALK = {"start": "Jack", "path": ["father", "prefer_pickup_location"]}


def walk_then_book(request: dict[str, Any]) -> ScriptedReply:
    """First the KG walk; then SearchHouse at the place the walk's result names (none: a made-up one)."""
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    if not results:
        return ScriptedReply(tool_calls=(tool_call("kg_search", WALK),))
    place = re.search(r"pickup_location_\d+", results[-1])
    return ScriptedReply(tool_calls=(tool_call("SearchHouse", {"where_to": place[0] if place else "x"}),))


def test_fc_runs_its_kg_calls_in_the_sandbox_and_is_scored_on_the_candidate_call(tmp_path: Path) -> None:
    with ScriptedModelServer(walk_then_book) as server:
        config = EvalConfig(
            out=tmp_path / "run",
            model=ModelConfig(server.model, api_base=server.api_base, api_key="sk-test", backoff_base=0.01),
            env_id="FamilyTool-v0",
            env_kwargs={"variant": "e", "kg": "tools", "max_turns": 3},
            agent="fc",
            task_ids=("KGMTUbench_0",),
            concurrency=1,
            progress=False,
        )
        summary = EvalRun(config).run()
        [first, second] = server.requests
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert {"kg_search", "kg_father", "SearchHouse"} <= offered
    assert "pickup_location_0007" in second["messages"][-1]["content"]
    [record] = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert record["error"] is None and record["terminated"] and record["turns"] == 2
    walk, book = record["calls"]
    assert (walk["name"], walk["status"], walk["executed"]) == ("kg_search", "ok", True)
    assert (book["name"], book["arguments"]) == ("SearchHouse", {"where_to": "pickup_location_0007"})
    metrics = record["metrics"]
    assert (metrics["tool_em"], metrics["tool_acc"], metrics["value_acc"]) == (1.0, 1.0, 1.0)
    assert record["reward"] == 1.0 and summary["episodes"] == 1 and summary["errors"] == 0
