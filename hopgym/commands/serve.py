"""``hopgym serve``: start a model server (the embedded local model, vLLM, a scripted mock) or an env server
(OpenEnv), and keep it running."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import time

from hopgym.commands.env_arguments import add_env_arguments, env_kwargs_from
from hopgym.errors import ConfigError, ModelError

API_KEY_VARIABLE = "HOPGYM_SERVE_API_KEY"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SESSION_TIMEOUT = 600.0
"""``serve env``'s default seconds a session may wait for its client. Longer than one model turn of a
batched sampler (the client's idle time between steps); short enough that a session a live client forgot (a
trainer stopped between steps, a notebook holding a client) gives back its place and sandbox within
minutes. A dropped connection needs no timeout: uvicorn's WebSocket pings (every 20 s) find it."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="start a model server or an env server and wait until it is stopped"
    )
    servers = parser.add_subparsers(dest="server", required=True, metavar="SERVER")

    local = servers.add_parser("local", help="the embedded SmolLM2-135M-Instruct on llama-cpp-python")
    local.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    local.add_argument("--n-ctx", type=int, default=8192, help="context length in tokens (default: 8192)")
    local.add_argument(
        "--threads",
        type=int,
        help="CPU threads to generate and to read prompts (default: $HOPGYM_LOCAL_THREADS, else "
        "llama-cpp's choice: half the cores to generate, all of them to read prompts)",
    )
    local.set_defaults(func=serve_local)

    vllm = servers.add_parser("vllm", help="vllm serve MODEL with automatic tool choice")
    vllm.add_argument("model", help="Hugging Face model id or path")
    vllm.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    vllm.add_argument("--tool-call-parser", help="override the parser chosen from the model family")
    vllm.add_argument(
        "--vllm-arg", action="append", default=[], metavar="ARG", help="extra vllm serve argument"
    )
    vllm.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds to wait for readiness")
    vllm.set_defaults(func=serve_vllm)

    scripted = servers.add_parser(
        "scripted",
        help="a mock OpenAI server for smoke tests without a model",
        description="Answers every chat request by a fixed policy: while no tool result is in the "
        "conversation it calls the first offered tool with placeholder arguments, then it answers with "
        "the last tool result (or 'unknown'). Deterministic, instant, any env and agent.",
    )
    scripted.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    scripted.set_defaults(func=serve_scripted)

    env = servers.add_parser(
        "env",
        help="an env as an OpenEnv server (WebSocket sessions at /ws; needs hopgym[serve])",
        description="Serves the env over OpenEnv's protocol (openenv-core): each WebSocket session at /ws "
        "gets its own env, closed with its sandbox workers when the session ends or drops. Clients choose "
        "tasks (reset task_id= or index=) and send actions; the env and its kwargs are fixed here.",
    )
    add_env_arguments(env)
    env.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    env.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1); any other needs an API key",
    )
    env.add_argument(
        "--api-key",
        help=f"key every request must carry as 'Authorization: Bearer KEY' (default: ${API_KEY_VARIABLE})",
    )
    env.add_argument(
        "--max-sessions",
        type=int,
        default=8,
        help="envs (sessions) alive at once; a session beyond is refused with a message (default: 8)",
    )
    env.add_argument(
        "--session-timeout",
        type=float,
        default=SESSION_TIMEOUT,
        metavar="SECONDS",
        help="close a session (its env, sandbox and socket) whose client sent nothing for this long; "
        f"0: never (default: {SESSION_TIMEOUT:g})",
    )
    env.set_defaults(func=serve_env)


def _serve_until_stopped(server, model_string: str) -> int:
    with server:
        print(f"ready: --model {model_string} --api-base {server.api_base}", flush=True)
        print(f"log: {server.log_path}  (Ctrl-C stops the server)", flush=True)
        while server.running:
            time.sleep(1.0)
    raise ModelError(f"{server.name} stopped unexpectedly; {server.log_excerpt()}")


def serve_local(args: argparse.Namespace) -> int:
    from hopgym.agents.model.local_server import local_model_string, local_server

    return _serve_until_stopped(
        local_server(port=args.port, n_ctx=args.n_ctx, threads=args.threads), local_model_string()
    )


def serve_scripted(args: argparse.Namespace) -> int:
    from hopgym.agents.model.scripted_server import ScriptedModelServer, smoke_script

    with ScriptedModelServer(smoke_script, port=args.port) as server:
        print(f"ready: --model {server.model} --api-base {server.api_base} --api-key sk", flush=True)
        print("(Ctrl-C stops the server)", flush=True)
        while True:
            time.sleep(3600)


def serve_vllm(args: argparse.Namespace) -> int:
    from hopgym.agents.model.vllm_server import vllm_model_string, vllm_server

    server = vllm_server(
        args.model,
        port=args.port,
        tool_call_parser=args.tool_call_parser,
        extra_args=args.vllm_arg,
        startup_timeout=args.startup_timeout,
    )
    return _serve_until_stopped(server, vllm_model_string(args.model))


def check_exposure(host: str, api_key: str | None) -> None:
    """An env server on any address but loopback needs an API key."""
    if api_key:
        return
    loopback = host in LOOPBACK_HOSTS
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if not loopback:
        raise ConfigError(
            f"--host {host} opens the env server beyond this machine: give --api-key KEY (or set "
            f"{API_KEY_VARIABLE}); clients then send 'Authorization: Bearer KEY'"
        )


def serve_env(args: argparse.Namespace) -> int:
    from hopgym.envs.env_options import check_env_options

    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    check_exposure(args.host, api_key)
    env_kwargs = env_kwargs_from(args)
    check_env_options(args.env, env_kwargs)  # an unknown id or kwarg, before the slow imports below
    try:
        from hopgym.agents.adapters.openenv_server import ServedEnv, env_app, serving, uvicorn_server
    except ImportError as exc:
        raise ConfigError(
            f"hopgym serve env needs the serve extra: pip install 'hopgym[serve]' ({exc})"
        ) from exc
    served = ServedEnv(args.env, env_kwargs, args.max_sessions, args.session_timeout or None)
    isolation = served.check()
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(2048)  # clients may connect once the ready line is out; uvicorn accepts them soon after
    host, port = listener.getsockname()[:2]
    server = uvicorn_server(env_app(served, api_key))
    with serving(served), listener:
        url = f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{port}"
        print(f"ready: --base-url {url}", flush=True)
        idle = f"{args.session_timeout:g} s" if args.session_timeout else "never"
        print(
            f"env: {args.env}, sandbox: {isolation}, at most {args.max_sessions} sessions, "
            f"idle ones closed after: {idle}",
            flush=True,
        )
        print("(Ctrl-C stops the server)", flush=True)
        server.run(sockets=[listener])
    raise KeyboardInterrupt  # uvicorn returns once a signal stopped it
