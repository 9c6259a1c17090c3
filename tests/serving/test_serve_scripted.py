"""``hopgym serve scripted``: the mock OpenAI server as a subprocess, ``hopgym eval --api-base URL`` against
it as another, on real ToolHop tasks and the real sandbox; and the README's research loop, run line by line
from the README itself."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from hopgym.agents.model.scripted_server import placeholder_arguments, smoke_script
from tests.doc_blocks import doc_block
from tests.scripted_runs import TASKS, read_records
from tests.servers import hopgym, model_server, viewed_episodes


def test_eval_runs_against_the_served_mock_and_every_episode_calls_a_tool_then_answers(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    with model_server() as (model, api_base, api_key):
        command = ["eval", "--model", model, "--api-base", api_base, "--api-key", api_key, "--limit", "3"]
        done = subprocess.run(
            hopgym(*command, "--out", str(out), "--no-progress"), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    records = sorted(read_records(out), key=lambda r: r["index"])
    assert [r["task_id"] for r in records] == [task.id for task in TASKS[:3]]
    for record in records:
        assert record["error"] is None and len(record["calls"]) == 1
        assert record["calls"][0]["name"] == TASKS[record["index"]].tools[0]["function"]["name"]
        tool_result = next(m["content"] for m in record["messages"] if m["role"] == "tool")
        assert record["messages"][-1]["content"] == f"Final answer: {tool_result}"
    assert json.loads((out / "summary.json").read_text())["episodes"] == 3


def test_the_mock_policy_fills_required_parameters_by_type_and_answers_without_tools() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "unit": {"type": "string", "enum": ["km", "mi"]},
            "ratio": {"type": ["number", "null"]},
            "optional": {"type": "boolean"},
        },
        "required": ["name", "count", "unit", "ratio"],
    }
    assert placeholder_arguments(parameters) == {"name": "x", "count": 1, "unit": "km", "ratio": 1.0}
    tools = [{"type": "function", "function": {"name": "measure", "parameters": parameters}}]
    first = smoke_script({"messages": [{"role": "user", "content": "q"}], "tools": tools})
    assert first.tool_calls == (("measure", placeholder_arguments(parameters)),)
    answered = smoke_script({"messages": [{"role": "tool", "content": "42 km"}], "tools": tools})
    assert answered.content == "Final answer: 42 km" and not answered.tool_calls
    assert smoke_script({"messages": [{"role": "user", "content": "q"}]}).content == "Final answer: unknown"


def test_the_readme_research_loop_runs_as_written(tmp_path: Path) -> None:
    serve, *commands = doc_block("research-loop").commands()
    assert serve[:3] == ["hopgym", "serve", "scripted"] and serve[-1] == "&"  # started in the background
    assert [c[1] for c in commands] == ["eval", "view", "rescore", "report"]
    with model_server(*serve[3:-1]) as (_, api_base, _):
        assert api_base in commands[0]  # the eval line names the server's URL
        for command in commands:
            if command[1] == "view":  # serves until stopped: its page lists the run (browser: test_viewer.py)
                assert viewed_episodes(command, cwd=tmp_path) == 12
                continue
            done = subprocess.run(hopgym(*command[1:]), cwd=tmp_path, capture_output=True, text=True)
            assert done.returncode == 0, f"{shlex.join(command)}: {done.stderr}"
    summary = json.loads((tmp_path / "runs/loop/summary.json").read_text())
    assert summary["episodes"] == 12 and summary["samples_per_task"] == 3 and "3" in summary["pass_at_k"]
    assert json.loads((tmp_path / "runs/loop-normalized/summary.json").read_text())["episodes"] == 12
    report = (tmp_path / "runs/loop-report/report.md").read_text()
    assert "- `official`:" in report and "- `normalized`:" in report
