"""verifiers v1's own eval command (``eval``, verifiers 0.3.1's v1 stack, through its env-server pool) drives
ToolHop-v0, FamilyTool-v0 and KGTool-v0 through hopgym's v1 taskset against ``hopgym serve scripted``: every
task's reward, answer correctness, ToolHop's query columns and each env's paper columns equal ``hopgym eval``
on the same scripted replies, and each rollout's tools are its own task's, served over MCP. The task's MCP
toolset is also driven by MCP's own client: a bad call is the env's error (and the server keeps serving), and
a replay that does not match the tool results the model saw is refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.extras import require_extra

require_extra("verifiers.v1", "verifiers")

import verifiers.v1 as vf  # noqa: E402
from mcp.server.fastmcp import FastMCP  # noqa: E402
from mcp.shared.memory import create_connected_server_and_client_session  # noqa: E402

from hopgym.errors import DataError  # noqa: E402
from hopgym.serving.mcp_tools import call_tool, mcp_tools  # noqa: E402
from hopgym.serving.rollouts import make_env  # noqa: E402
from hopgym.serving.task_rows import task_starts  # noqa: E402
from hopgym.serving.verifiers_common import episode_columns  # noqa: E402
from hopgym.serving.verifiers_v1 import (  # noqa: E402
    HopgymData,
    HopgymToolset,
    HopgymToolsetConfig,
    replay,
)
from tests.harness_runs import ENVS, PAPER_COLUMNS, ROWS, hopgym_eval  # noqa: E402
from tests.paths import ROOT  # noqa: E402
from tests.servers import model_server  # noqa: E402

TASKSET_MODULE = ROOT / "environments" / "hopgym_v1"


def eval_config(env_id: str, env_kwargs: dict[str, Any], model: str, api_base: str, out: Path) -> str:
    """v1's eval config for ``ROWS`` tasks of one env: the harness and the tool servers run as local
    subprocesses (v1's default harness runtime is a remote Prime sandbox), no upload."""
    lines = [
        f'model = "{model.removeprefix("openai/")}"',
        f"num_tasks = {ROWS}",
        "push = false",
        f'output_dir = "{out}"',
        "[run]",
        f'dir = "{env_id}"',
        "[client]",
        f'base_url = "{api_base}"',
        'api_key_var = "SCRIPTED_KEY"',
        "[env.taskset]",
        'id = "hopgym-v1"',
        f'env = "{env_id}"',
        "[env.taskset.env_kwargs]",
        *(f"{key} = {json.dumps(value)}" for key, value in env_kwargs.items()),
        "[env.agent.runtime]",
        'type = "subprocess"',
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.early  # a v1 eval starts some ten processes (30 s of CPU): one env a test, on 3 workers
@pytest.mark.parametrize("env_id", list(ENVS))
def test_v1_eval_equals_hopgym_eval_on_the_same_scripted_replies(tmp_path: Path, env_id: str) -> None:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TASKSET_MODULE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    eval_command = Path(sys.executable).parent / "eval"  # verifiers' v1 console script
    kwargs = ENVS[env_id]
    with model_server() as (model, api_base, api_key):
        config = tmp_path / f"{env_id}.toml"
        config.write_text(eval_config(env_id, kwargs, model, api_base, tmp_path / "v1"))
        done = subprocess.run(
            [str(eval_command), "@", str(config), "--no-rich"],
            env={**environment, "SCRIPTED_KEY": api_key},
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = (tmp_path / "v1" / env_id / "traces.jsonl").read_text().splitlines()
        episodes = [json.loads(line) for line in lines]
        expected = hopgym_eval(env_id, model, api_base, api_key, tmp_path / env_id)
    tools = task_tools(env_id, kwargs)
    assert len(episodes) == ROWS
    seen = {}
    for episode in episodes:
        assert episode["ok"] and episode["errors"] == []
        (trace,) = episode["traces"]
        data = trace["task"]["data"]
        record = expected[data["task_id"]]
        assert [tool["name"] for tool in trace["tools"]] == tools[data["index"]]
        assert trace["rewards"]["reward"]["score"] == pytest.approx(record["reward"] or 0.0)
        seen[data["task_id"]] = trace["metrics"]
    assert seen == {task: episode_columns(record, PAPER_COLUMNS[env_id]) for task, record in expected.items()}
    if env_id != "ToolHop-v0":
        return
    # ToolHop's scripted replies answer some tasks right (the other envs' none), so a correct answer is read.
    assert any(m["answer_correctness"] for m in seen.values()), "no answer was correct"
    # The scorer refuses a trace whose tool results are not the env's (and still scores the true one).
    episode = next(e for e in episodes if e["traces"][0]["nodes"][2]["message"]["role"] == "tool")
    trace = episode["traces"][0]
    data = HopgymData.model_validate(trace["task"]["data"])
    genuine = replay(data, vf.WireTrace.model_validate(trace))["outcome"]
    assert genuine["reward"] == trace["rewards"]["reward"]["score"]
    trace["nodes"][2]["message"]["content"] = "Berlin"
    with pytest.raises(DataError, match="differ from the replay"):
        replay(data, vf.WireTrace.model_validate(trace))


def task_tools(env_id: str, env_kwargs: dict[str, Any]) -> list[list[str]]:
    """The tool names each of the first ``ROWS`` tasks of the env starts with (ToolHop's differ per task)."""
    env = make_env(env_id, env_kwargs)
    try:
        starts = task_starts(env, range(ROWS))
    finally:
        env.close()
    return [[tool["function"]["name"] for tool in start.tools] for start in starts]


def toolhop_task(index: int) -> tuple[HopgymData, dict[str, Any]]:
    env = make_env("ToolHop-v0")
    try:
        observation, info = env.reset(options={"index": index})
    finally:
        env.close()
    return HopgymData(env_id="ToolHop-v0", index=index, task_id=info["task_id"]), observation


def test_the_toolset_lists_its_tasks_tools_over_mcp_and_a_bad_call_is_the_envs_error() -> None:
    """MCP's own client session against the toolset's server: ``tools/list`` is the task's tools; each call
    (a hallucinated tool, one missing its parameters, a well-formed one after them) answers what
    ``env.step`` answers for it on an env of its own, a failed call as an MCP error."""
    data, observation = toolhop_task(0)
    name = observation["tools"][0]["function"]["name"]
    argument = next(iter(observation["tools"][0]["function"]["parameters"]["properties"]))
    calls = [("no_such_tool", {"x": 1}), (name, {}), (name, {argument: "Raoul I of Brienne"})]
    reference = make_env("ToolHop-v0")
    try:
        reference.reset(options={"index": 0})
        expected = [call_tool(reference, tool, arguments) for tool, arguments in calls]
    finally:
        reference.close()
    assert [result.status for result in expected[:2]] == ["tool_hallucination", "parameter_missing"]

    async def scenario() -> None:
        toolset = HopgymToolset(HopgymToolsetConfig())
        async with toolset._exit_stack:
            await toolset.setup_task(data)
            server = FastMCP("hopgym")
            toolset.register(server)
            async with create_connected_server_and_client_session(server._mcp_server) as client:
                listed = (await client.list_tools()).tools
                assert [t.model_dump(include={"name", "description", "inputSchema"}) for t in listed] == (
                    mcp_tools(observation)
                )
                for (tool, arguments), want in zip(calls, expected, strict=True):
                    got = await client.call_tool(tool, arguments)
                    assert (got.content[0].text, got.isError) == (want.text, want.error_type is not None)

    asyncio.run(scenario())


def test_a_toolset_whose_data_names_another_task_refuses_to_serve() -> None:
    """The taskset and the tool server must read the same tasks: a task id the server's env does not have at
    that index (another HOPGYM_DATA) is a DataError naming both ids, and no tools are served."""
    data, _ = toolhop_task(1)
    wrong = data.model_copy(update={"task_id": "toolhop-999"})

    async def scenario() -> None:
        toolset = HopgymToolset(HopgymToolsetConfig())
        async with toolset._exit_stack:
            with pytest.raises(DataError, match="toolhop-999"):
                await toolset.setup_task(wrong)
            assert toolset._tools == []
            await toolset.setup_task(data)
            assert toolset._tools

    asyncio.run(scenario())
