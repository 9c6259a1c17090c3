"""``hopgym serve env``: a hopgym env as an OpenEnv MCP environment, served by openenv's ``create_app``.

Stock OpenEnv clients get whole observations; hopgym's own client asks for delta frames at reset. MCP
actions list the episode's task's tools and call them through ``env.step`` in the sandbox, with OpenEnv's
typed error mapped from the call status (:mod:`hopgym.serving.mcp_tools`); the same tools answer
JSON-RPC ``tools/list`` / ``tools/call`` on ``/mcp`` in an HTTP MCP session (``openenv/session/create``).

Each WebSocket session (``/ws``) gets its own env, made at its first ``reset`` and closed, with its sandbox
workers, when the session ends or its connection drops (openenv closes the session's environment either
way). The env id and kwargs are the operator's (``--env``, ``--env-arg``), checked before the server
listens; a client chooses only tasks (``reset(task_id=... | index=..., seed=...)``) and actions, so nothing
it sends reaches the data path, the sandbox options or another session. A bad reset option or action is a
``ConfigError`` / ``ActionError`` sent back as an error frame on that session only, which goes on.

At most ``max_sessions`` envs exist at once (:class:`~hopgym.serving.env_pool.EnvPool`; a session's env
gives its place back once it is closed, so envs still closing count): openenv refuses a WebSocket session
beyond its cap (an error frame with code ``CAPACITY_REACHED``, then a close), and the plain HTTP ``/reset``
and ``/step`` routes, which openenv serves with a fresh env per request, take a place of the same cap while
they run. A session
whose client sends nothing for ``session_timeout`` seconds is closed (:class:`IdleClose`): its env and
sandbox workers, its place, and its socket, with close code :data:`IDLE_CLOSE_CODE`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import resource
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gymnasium as gym
from fastmcp import FastMCP
from fastmcp.tools.base import Tool as FastMCPTool
from fastmcp.tools.base import ToolResult
from pydantic import PrivateAttr

from hopgym import __version__
from hopgym.envs.chat import chat_env
from hopgym.errors import ActionError, ConfigError, HopgymError
from hopgym.serving.asgi_middleware import API_KEY_HEADER as API_KEY_HEADER  # kept importable here
from hopgym.serving.asgi_middleware import IDLE_CLOSE_CODE as IDLE_CLOSE_CODE
from hopgym.serving.asgi_middleware import ApiKeyGate, IdleClose, QuietClose
from hopgym.serving.env_pool import EnvPool
from hopgym.serving.mcp_tools import McpCallResult, McpTool, call_tool, mcp_tools
from hopgym.serving.openenv_core import (
    CallToolAction,
    EnvironmentMetadata,
    ListToolsObservation,
    MCPEnvironment,
    Tool,
    ToolError,
    ToolErrorType,
    create_app,
)
from hopgym.serving.openenv_types import (
    HopgymAction,
    HopgymObservation,
    HopgymState,
    HopgymToolObservation,
)
from hopgym.serving.rollouts import make_env

ALLOW_UNISOLATED_CODE = "--allow-unisolated-code"
"""The option by which the operator lets tool code run where the sandbox does not isolate the files."""
ObservationT = TypeVar("ObservationT", HopgymObservation, HopgymToolObservation)


FILES_PER_SESSION = 16
"""Open files one served session holds: 13 measured (its sandbox workers' pipes and process handles, its
socket; docs/benchmarks.md, bench_serve_memory.py), with room."""
FILES_BESIDE_SESSIONS = 256
"""The server's own open files beside its sessions': listener, imports, logs, sessions still closing."""


def raise_open_file_limit(max_sessions: int) -> None:
    """Raise the soft open-file limit to what ``max_sessions`` sessions need, up to the hard limit, so a full
    server does not fail a session past the 80th with "Too many open files" (the usual soft limit is 1,024);
    a hard limit too low for them is a :class:`ConfigError` now, naming both ways out."""
    needed = FILES_BESIDE_SESSIONS + FILES_PER_SESSION * max_sessions
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        fits = max(0, (hard - FILES_BESIDE_SESSIONS) // FILES_PER_SESSION)
        raise ConfigError(
            f"--max-sessions {max_sessions} needs about {needed} open files, and this process may open at "
            f"most {hard} (its hard limit, `ulimit -Hn`): raise that limit or lower --max-sessions to {fits}"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


@dataclass
class ServedEnv:
    """What the server serves: one env id and its kwargs, with a cap on the envs alive at once."""

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_sessions: int = 8
    session_timeout: float | None = None
    """Seconds of client silence after which a session is closed (None: never; ``hopgym serve env``'s
    default is :data:`hopgym.commands.serve.SESSION_TIMEOUT`)."""
    allow_unisolated_code: bool = False
    """Run CodeAct code and ToolTasks tools even where the sandbox does not isolate the files (isolation
    ``none``): that code then reads whatever the workers' uid can (:data:`ALLOW_UNISOLATED_CODE`)."""
    pool: EnvPool = field(init=False)
    """The sessions' envs: a new one per session, closed when it ends; none when all are taken."""

    def __post_init__(self) -> None:
        if self.session_timeout is not None and not self.session_timeout > 0:
            raise ConfigError(f"--session-timeout must be positive, got {self.session_timeout!r}")
        make = functools.partial(make_env, self.env_id, self.env_kwargs)
        self.pool = EnvPool(make, self.max_sessions, reuse=False, cap_name="--max-sessions")

    def check(self) -> str:
        """Make one env, reset it and close it: a bad kwarg value or missing data fails here, before the
        server listens (unknown ids and kwargs: ``check_env_options``), and so does an env that runs the
        tasks' own tool code (``runs_task_code``: ToolTasks-v0) where the sandbox does not isolate the
        files, unless allowed; the open-file limit the sessions need is raised first
        (:func:`raise_open_file_limit`). Returns the sandbox isolation."""
        raise_open_file_limit(self.max_sessions)
        env = make_env(self.env_id, self.env_kwargs)
        try:
            if chat_env(env).runs_task_code and not self.allow_unisolated_code and not isolates_files(env):
                raise ConfigError(
                    f"{self.env_id} runs its tool files in a sandbox that does not isolate the files "
                    f"(isolation 'none'): that code would read the data and whatever else the server's user "
                    f"can; use a sandbox that isolates (isolation 'auto', 'bwrap' or 'namespaces'), or pass "
                    f"{ALLOW_UNISOLATED_CODE} to run it anyway"
                )
            _, info = env.reset(options={"index": 0})
            return str(info.get("isolation"))
        finally:
            env.close()


class HopgymEnvironment(MCPEnvironment):
    """One session's env behind OpenEnv's MCP environment interface: hopgym actions (assistant messages)
    step the env; ``ListToolsAction`` lists the tools of the episode's task and ``CallToolAction`` runs
    one of them as one turn through ``env.step`` (:mod:`hopgym.serving.mcp_tools`)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedEnv) -> None:
        super().__init__(FastMCP(f"hopgym {served.env_id}"))
        self._served = served
        self._env: gym.Env | None = None
        self._state = HopgymState(env_id=served.env_id)
        self._tools: list[dict[str, Any]] = []
        """The tools the episode's task offers."""
        self._published: set[str] = set()
        """The names of the tools on the session's MCP server."""
        self._delta_frames = False
        """Whether the client asked at reset for delta frames (hopgym's client does; stock ones get whole
        observations)."""
        self._sent: list[dict[str, Any]] = []
        """The chat as the session's client has it (what the last observation sent it made up)."""
        self._sent_tools: list[dict[str, Any]] | None = None
        """The tools the session's client has (None: none sent yet in this episode)."""

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        delta_frames: bool = False,
        **options: Any,
    ) -> HopgymObservation:
        """Start an episode: ``options`` are the env's reset options (``task_id`` or ``index``);
        ``delta_frames``: send each step's new messages only, and tools only when they changed."""
        if self._env is None:
            self._env = self._served.pool.open()
        observation, info = self._env.reset(seed=seed, options=options or None)
        self._state = HopgymState(
            env_id=self._served.env_id, episode_id=episode_id, task_id=info.get("task_id")
        )
        self._publish(observation["tools"])
        self._delta_frames = delta_frames is True
        self._sent, self._sent_tools = [], None
        return self._observation(HopgymObservation, observation, 0.0, False, False, info)

    def _step_impl(
        self, action: HopgymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> HopgymObservation:
        """A hopgym action (the MCP ones are answered before: :class:`HopgymAction` parses only these)."""
        env = self._running_env()
        if action.code is not None and not (self._served.allow_unisolated_code or isolates_files(env)):
            raise ActionError(
                "this server refuses CodeAct code: its sandbox does not isolate the files (isolation "
                f"'none'), so code would read the server's data; send tool_calls or a final answer, or ask "
                f"the operator to restart it with an isolating sandbox (or {ALLOW_UNISOLATED_CODE})"
            )
        observation, reward, terminated, truncated, info = env.step(action.message())
        self._state.step_count += 1
        return self._observation(
            HopgymObservation, observation, float(reward), bool(terminated), bool(truncated), info
        )

    async def _async_handle_list_tools(self) -> ListToolsObservation:
        """The tools of the episode's task (none before the first reset)."""
        listed = mcp_tools({"tools": self._tools})
        return ListToolsObservation(
            tools=[
                Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"])
                for t in listed
            ]
        )

    async def _async_handle_call_tool(
        self, action: CallToolAction, timeout_s: float | None = None
    ) -> HopgymToolObservation:
        """One tool call through ``env.step`` (in a worker thread: the sandbox call blocks), within the env's
        own call deadline (``timeout_s`` is not applied: the env's ``timeout`` status is the answer)."""
        called = await self._call_in_thread(action.tool_name, action.arguments)
        error = None
        if called.error_type is not None:
            error = ToolError(error_type=ToolErrorType(called.error_type), message=called.text)
        result = {"content": [{"type": "text", "text": called.text}], "isError": error is not None}
        return self._observation(
            HopgymToolObservation,
            called.observation,
            called.reward,
            called.terminated,
            called.truncated,
            called.info,
            tool_name=action.tool_name,
            result=result,
            error=error,
            status=called.status,
        )

    def _publish(self, tools: list[dict[str, Any]]) -> None:
        """Offer the episode's tools on the session's MCP server too (``tools/list`` and ``tools/call`` of
        JSON-RPC on ``/mcp``), in place of the last episode's (removed by name: once per name, as the server
        holds one tool of a name however often a task lists it)."""
        provider = self.mcp_server.local_provider
        for name in self._published:
            provider.remove_tool(name)
        self._tools = tools
        listed = mcp_tools({"tools": tools})
        self._published = set()
        for tool in listed:
            if tool["name"] not in self._published:
                provider.add_tool(EpisodeTool.of(tool, self._call_in_thread))
                self._published.add(tool["name"])

    async def _call_in_thread(self, name: str, arguments: dict[str, Any]) -> McpCallResult:
        """:func:`call_tool` on the session's env, in a worker thread (the sandbox call blocks)."""
        env = self._running_env()
        call_id = f"call_{self._state.step_count + 1}_0"  # the env's id for an OpenAI call without one
        called = await asyncio.get_running_loop().run_in_executor(
            None, call_tool, env, name, arguments, call_id
        )
        self._state.step_count += 1
        return called

    def _running_env(self) -> gym.Env:
        if self._env is None:
            raise HopgymError("step() called before reset(); call reset()")
        return self._env

    @property
    def state(self) -> HopgymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self._served.env_id,
            description=f"hopgym's {self._served.env_id}: multi-hop tool use, every tool call sandboxed",
            version=__version__,
        )

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            self._served.pool.release(env)
        super().close()

    def _observation(
        self,
        kind: type[ObservationT],
        observation: Mapping[str, Any],
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
        **fields: Any,
    ) -> ObservationT:
        """The observation to send: the whole chat and tools; with delta frames, the messages the client
        has not seen yet, or the whole chat when the env's chat does not extend what was sent (a new
        episode, or an env that rewrites its history), and the tools only when they are not the ones sent
        before. (The env hands back the same message and tool dicts at every step, so these comparisons
        stop at identity.)"""
        messages, tools = observation["messages"], observation["tools"]
        start, same_tools = 0, False
        if self._delta_frames:
            start = len(self._sent)
            if len(messages) < start or messages[:start] != self._sent:
                start = 0
            same_tools = tools == self._sent_tools
            self._sent, self._sent_tools = list(messages), tools  # what the client holds once this is out
        # Validated: pydantic's validation of plain JSON data costs less than its model_construct.
        return kind(
            messages=messages[start:],
            messages_from=start,
            tools=[] if same_tools else tools,
            same_tools=same_tools,
            info=info,
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            **fields,
        )


class EpisodeTool(FastMCPTool):  # type: ignore[misc]  # fastmcp's Tool is untyped where mypy reads it
    """One tool of the episode's task on the session's FastMCP server: its JSON schema as the task gives it,
    and a call that runs through the env (an MCP error result for any status but ``ok``)."""

    _call: Callable[[str, dict[str, Any]], Awaitable[McpCallResult]] = PrivateAttr()

    @classmethod
    def of(
        cls, tool: McpTool, call: Callable[[str, dict[str, Any]], Awaitable[McpCallResult]]
    ) -> EpisodeTool:
        made = cls(name=tool["name"], description=tool["description"], parameters=tool["inputSchema"])
        made._call = call
        return made

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        called = await self._call(self.name, arguments)
        fields = {"status": called.status, "error_type": called.error_type, "reward": called.reward}
        return ToolResult(
            content=called.text,
            structured_content={**fields, "done": called.done},
            is_error=called.error_type is not None,
        )


def isolates_files(env: gym.Env) -> bool:
    """Whether ``env``'s tool code is kept from the server's files (true for an env that runs no tools)."""
    sandbox = chat_env(env).sandbox
    return sandbox is None or sandbox.isolates_files


def uvicorn_server(app: Any) -> Any:
    """The uvicorn server ``hopgym serve env`` runs ``app`` on. No permessage-deflate: on the loopback or a
    LAN, compressing every observation costs more than the bytes it saves. The loop is uvloop (the ``serve``
    extra installs it; uvicorn's ``auto`` picks it): about 60 µs less per step than asyncio's own."""
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(app, log_level="warning", ws="websockets-sansio", ws_per_message_deflate=False)
    )


def env_app(served: ServedEnv, api_key: str | None = None) -> Any:
    """The ASGI app: openenv's ``create_app`` over :class:`HopgymEnvironment`, behind an API key check
    when ``api_key`` is given."""
    app = create_app(
        functools.partial(HopgymEnvironment, served),
        HopgymAction,
        HopgymObservation,
        env_name=served.env_id,
        max_concurrent_envs=served.max_sessions,
    )
    if served.session_timeout is not None:
        app = IdleClose(app, served.session_timeout)
    quiet = QuietClose(app)
    return ApiKeyGate(quiet, api_key) if api_key else quiet


@contextlib.contextmanager
def serving(served: ServedEnv) -> Iterator[ServedEnv]:
    """Close every env still open when the server stops."""
    try:
        yield served
    finally:
        served.pool.close_all()
