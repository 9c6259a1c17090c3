"""hopgym's envs as a verifiers v1 taskset: ``eval hopgym-v1 --env.taskset.env KGTool-v0 ...``.

verifiers 0.3's v1 stack runs a task's tools as MCP servers the harness reaches over HTTP (``Task.toolsets``,
launched per rollout as ``python -m`` this module), not as Python callables in the eval process: that is the
path its tasksets document, its env-server pool and prime-rl run, and the one that gives ToolHop each query's
own tools. So each :class:`HopgymTask` carries a :class:`HopgymToolset` that, for that rollout, resets a
hopgym env on the task and answers ``tools/list`` with the task's tools and ``tools/call`` with one call
through ``env.step`` (:mod:`hopgym.serving.mcp_tools`: validated, run in the sandbox, recorded).

The final answer is not a tool call, so the toolset never sees it: the task's ``@vf.reward`` replays the
trace's assistant turns through a fresh env (the same calls, the same sandbox), checks that every tool
result the model saw is the one the replay gives, and takes hopgym's reward, answer correctness, ToolHop's
query-level columns and the env's paper columns from that episode (the columns of the legacy adapter,
:func:`hopgym.serving.verifiers_common.episode_columns`).
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import verifiers.v1 as vf
from mcp import types as mcp_types
from mcp.server.fastmcp import FastMCP
from pydantic import Field
from verifiers.v1.harnesses.null import NullHarness

from hopgym.envs.chat import chat_env
from hopgym.envs.outcome import NOT_ENDED, Outcome
from hopgym.errors import ConfigError, DataError
from hopgym.serving.mcp_tools import call_tool, mcp_tools
from hopgym.serving.rollouts import make_env
from hopgym.serving.task_rows import iter_task_starts, verifiers_prompt
from hopgym.serving.verifiers_common import action_of, episode_columns


class HopgymData(vf.TaskData):
    """One task of one hopgym env: what a toolset process needs to reset its own env on it."""

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    index: int
    task_id: str


class HopgymToolsetConfig(vf.ToolsetConfig):
    pass


class HopgymTaskConfig(vf.TaskConfig):
    tools: HopgymToolsetConfig = HopgymToolsetConfig()
    """Where the task's tool server runs (``--env.taskset.task.tools.*``; a subprocess by default)."""


class HopgymTasksetConfig(vf.TasksetConfig):
    task: HopgymTaskConfig = HopgymTaskConfig()
    env: str = "ToolHop-v0"
    """The hopgym env id."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``gym.make`` keyword arguments of the env (e.g. KGTool's ``kg``, ``patterns``, ``n``, ``seed``)."""


class HopgymToolset(vf.Toolset[HopgymToolsetConfig, vf.State]):
    """A rollout's MCP server of its task's tools, backed by one hopgym env reset on the task."""

    TOOL_PREFIX = None
    """The env's own tool names: the model calls what the env's prompt and scoring name."""

    def __init__(self, config: HopgymToolsetConfig) -> None:
        super().__init__(config)
        self._env: gym.Env | None = None
        self._tools: list[mcp_types.Tool] = []

    async def setup_task(self, task: HopgymData) -> None:
        env = make_env(task.env_id, task.env_kwargs)
        self._exit_stack.callback(env.close)
        observation, info = env.reset(options={"index": task.index})
        if info["task_id"] != task.task_id:
            raise DataError(
                f"task {task.index} of {task.env_id} is {info['task_id']!r} in this process, "
                f"{task.task_id!r} in the taskset: both must read the same HOPGYM_DATA"
            )
        self._env = env
        self._tools = [mcp_types.Tool(**tool) for tool in mcp_tools(observation)]

    def register(self, mcp: FastMCP) -> None:
        # FastMCP derives a tool's schema from a Python signature; a task's tools are JSON schemas that
        # differ per ToolHop query, and the env (not MCP) must judge a bad name or bad arguments, so the
        # server's list/call handlers are set on its low-level server, with input validation off.
        server = mcp._mcp_server

        @server.list_tools()
        async def list_tools() -> list[mcp_types.Tool]:
            return self._tools

        @server.call_tool(validate_input=False)
        async def call(name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
            if self._env is None:
                raise ConfigError("the hopgym toolset got a call before its task was set up")
            result = call_tool(self._env, name, arguments)
            text = mcp_types.TextContent(type="text", text=result.text)
            return mcp_types.CallToolResult(content=[text], isError=result.error_type is not None)


class HopgymTask(vf.Task[HopgymData, vf.State, HopgymTaskConfig]):
    """A hopgym task: its prompt is the env's first observation, its tools its own :class:`HopgymToolset`."""

    @classmethod
    def toolsets(cls, config: HopgymTaskConfig) -> list[vf.Toolset]:
        return [HopgymToolset(config.tools)]

    @vf.reward
    async def hopgym(self, task: HopgymData, trace: vf.Trace) -> Mapping[str, float]:
        """hopgym's reward and, at weight 0, its columns; the replay's episode must be the rollout's."""
        episode = await asyncio.to_thread(replay, task, trace)  # the env worker's loop serves other rollouts
        trace.record_metrics(episode_columns(episode["outcome"], episode["metrics"]))
        return {"reward": float(episode["outcome"]["reward"])}


def replay(task: HopgymData, trace: vf.Trace) -> dict[str, Any]:
    """The trace's assistant turns through a fresh env on ``task``: the episode's outcome (reward, correct,
    calls, the env's metrics) and the env's paper-column keys. A tool result the model saw that differs from
    the replay's is a :class:`DataError` (the toolset and the scorer did not run the same episode)."""
    env = make_env(task.env_id, task.env_kwargs)
    try:
        env.reset(options={"index": task.index})
        outcome, calls = NOT_ENDED, list[Any]()
        for message in trace.assistant_messages:
            _, reward, terminated, truncated, info = env.step(action_of(message))
            calls += info["calls"]
            outcome = Outcome.of_step(reward, terminated, truncated, info)
            if outcome.ended:
                break
        # A call's feedback is what the toolset answered; the call that ends an episode (FamilyTool's one
        # call) has no tool message in the env's chat, yet the model saw its result.
        seen = [call["feedback"] for call in calls]
        shown = [message.content for message in trace.tool_messages]
        if shown != seen[: len(shown)]:
            raise DataError(f"task {task.task_id}: the tool results the model saw differ from the replay's")
        columns = tuple(chat_env(env).paper_metrics)
        return {"outcome": {**outcome.fields(), "calls": calls}, "metrics": columns}
    finally:
        env.close()


class HopgymTaskset(vf.Taskset[HopgymTask, HopgymTasksetConfig]):
    """Every task of ``gym.make(config.env, **config.env_kwargs)``, made as they are read (``head(n)`` resets
    only n)."""

    def load(self) -> Iterator[HopgymTask]:
        env = make_env(self.config.env, self.config.env_kwargs)
        try:
            for start in iter_task_starts(env):
                data = HopgymData(
                    idx=start.index,
                    name=start.task_id,
                    prompt=verifiers_prompt(start),
                    env_id=self.config.env,
                    env_kwargs=self.config.env_kwargs,
                    index=start.index,
                    task_id=start.task_id,
                )
                yield HopgymTask(data, self.config.task)
        finally:
            env.close()


class InterpreterScripts:
    """A runtime whose ``prepare_uv_script`` runs the script on this interpreter: the runtime's other
    methods are its own."""

    def __init__(self, runtime: vf.Runtime) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(
        self, script: str | bytes, env: Any = None, *, activate: bool = True
    ) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f"{self._runtime.scripts_dir}/{hashlib.sha256(data).hexdigest()}.py"
        await self._runtime.write(path, data)
        return [sys.executable, path]


class HopgymHarness(NullHarness):
    """verifiers' own ``null`` harness (its chat loop with the rollout's MCP tools), its program run on this
    interpreter. The ``null`` harness makes a uv environment for the program (uv installed into the home
    directory, the program's packages from the index) on every new machine; the program's packages
    (openai, mcp, httpx, tenacity) are verifiers' own dependencies, installed here already."""

    async def setup(self, runtime: vf.Runtime) -> None:
        await super().setup(InterpreterScripts(runtime))  # type: ignore[arg-type]

    async def launch(self, ctx: Any, trace: Any, runtime: vf.Runtime, *args: Any) -> vf.ProgramResult:
        return await super().launch(ctx, trace, InterpreterScripts(runtime), *args)  # type: ignore[arg-type]


if __name__ == "__main__":  # verifiers launches a rollout's tool server as ``python -m`` this module
    HopgymToolset.run()
