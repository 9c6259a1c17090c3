"""``hopgym serve``: start a model server (the embedded local model, vLLM, a scripted mock) or an env server
(OpenEnv), and keep it running."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import stat
import sys
import time
from typing import TYPE_CHECKING

from hopgym.commands.env_arguments import add_env_arguments, env_kwargs_from
from hopgym.commands.model_arguments import model_argument
from hopgym.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from hopgym.serving.rollouts import RolloutsFactory

API_KEY_VARIABLE = "HOPGYM_SERVE_API_KEY"
KEY_FILE_LIMIT = 4096
"""The most bytes ``--api-key-file`` reads: a key, not a file read whole by mistake."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SESSION_TIMEOUT = 600.0
"""``serve env``'s default seconds a session may wait for its client. Longer than one model turn of a
batched sampler (the client's idle time between steps); short enough that a session a live client forgot (a
trainer stopped between steps, a notebook holding a client) gives back its place and sandbox within
minutes. A dropped connection needs no timeout: uvicorn's WebSocket pings (every 20 s) find it."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="start a model server or an env server and wait until it is stopped",
        description="Model servers (an agent's model, for hopgym eval --model / --api-base): local, vllm, "
        "scripted. Env servers (envs for trainers and harnesses elsewhere, for --env-url): env, fleet.",
    )
    servers = parser.add_subparsers(dest="server", required=True, metavar="SERVER")

    local = servers.add_parser(
        "local", help="model server: the embedded SmolLM2-135M-Instruct on llama-cpp-python"
    )
    local.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    local.add_argument("--n-ctx", type=int, default=8192, help="context length in tokens (default: 8192)")
    local.add_argument(
        "--threads",
        type=int,
        help="CPU threads to generate and to read prompts (default: $HOPGYM_LOCAL_THREADS, else "
        "llama-cpp's choice: half the cores to generate, all of them to read prompts)",
    )
    local.set_defaults(func=serve_local)

    vllm = servers.add_parser(
        "vllm",
        help="model server: vLLM's OpenAI-compatible server for MODEL, with automatic tool choice",
        description="Starts `vllm serve MODEL` with automatic tool choice and the tool-call parser of the "
        "model's family, prints the --model and --api-base to pass to hopgym eval, and waits until stopped. "
        "Example: hopgym serve vllm Qwen/Qwen2.5-7B-Instruct",
    )
    vllm.add_argument("model", type=model_argument, help="Hugging Face model id or local folder")
    vllm.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    vllm.add_argument("--tool-call-parser", help="override the parser chosen from the model family")
    vllm.add_argument(
        "--vllm-arg", action="append", default=[], metavar="ARG", help="extra vllm serve argument"
    )
    vllm.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds to wait for readiness")
    vllm.set_defaults(func=serve_vllm)

    scripted = servers.add_parser(
        "scripted",
        help="model server: a mock OpenAI server for smoke tests without a model",
        description="Answers every chat request by a fixed policy: while no tool result is in the "
        "conversation it calls the first offered tool with placeholder arguments, then it answers with "
        "the last tool result (or 'unknown'). Deterministic, instant, any env and agent.",
    )
    scripted.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    scripted.set_defaults(func=serve_scripted)

    env = servers.add_parser(
        "env",
        help="env server: an env as an OpenEnv server (WebSocket sessions at /ws; needs hopgym[serve])",
        description="Serves the env over OpenEnv's protocol (openenv; MCP tools): each WebSocket session "
        "at /ws gets its own env, closed with its sandbox workers when the session ends or drops. Clients "
        "choose tasks (reset task_id= or index=) and send actions; the env and its kwargs are fixed here.",
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
        help="key every request must carry as 'Authorization: Bearer KEY'; other local users see it in the "
        f"server's command line: prefer --api-key-file or ${API_KEY_VARIABLE}",
    )
    env.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read the key from this file (its first line; readable by its owner only, mode 0600 or 0400); "
        f"default: ${API_KEY_VARIABLE}",
    )
    env.add_argument(
        "--allow-unisolated-code",
        action="store_true",
        help="run CodeAct code and ToolTasks tools even in a sandbox that does not isolate the files "
        "(isolation 'none'): that code then reads whatever the sandbox workers' uid can, on a host the "
        "server's own user's files (its data, its key); refused without this",
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

    fleet = servers.add_parser(
        "fleet",
        help="env servers on a Ray cluster's nodes, for --env-url (needs hopgym[serve,ray])",
        description="Starts --servers env servers as Ray actors spread over the cluster's nodes, each "
        "serving as serve env does on its node's address, prints their --env-url options, and waits until "
        "stopped (the servers stop with it; a dead node's are gone, and the clients play their episodes on "
        f"the others). The servers' key is read from --api-key-file or ${API_KEY_VARIABLE}; clients read "
        f"it from ${API_KEY_VARIABLE}.",
    )
    add_env_arguments(fleet)
    fleet.add_argument("--servers", type=int, required=True, help="env servers to start")
    fleet.add_argument(
        "--ray-address", help="the Ray cluster to join (default: RAY_ADDRESS, else a new local instance)"
    )
    fleet.add_argument(
        "--cpus-per-server", type=float, default=1.0, help="a node's CPUs each server takes (default: 1)"
    )
    fleet.add_argument(
        "--max-sessions", type=int, default=8, help="envs (sessions) each server keeps at once (default: 8)"
    )
    fleet.add_argument(
        "--api-key-file",
        metavar="PATH",
        help=f"the servers' key (as serve env's; default: ${API_KEY_VARIABLE})",
    )
    fleet.set_defaults(func=serve_fleet)


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


def served_api_key(given: str | None, path: str | None) -> str | None:
    """The env server's key: from ``--api-key`` (warned: local users read command lines), a key file, or
    :data:`API_KEY_VARIABLE`."""
    if given is not None and path is not None:
        raise ConfigError("give the key once: --api-key or --api-key-file, not both")
    if given is not None:
        print(
            f"warning: --api-key shows the key in this server's command line to every local user; "
            f"use --api-key-file PATH or ${API_KEY_VARIABLE}",
            file=sys.stderr,
            flush=True,
        )
        return given or None
    if path is not None:
        return read_key_file(path)
    return os.environ.get(API_KEY_VARIABLE) or None


def read_key_file(path: str) -> str:
    """The key in ``path``'s first line. Refused when the file is readable by its group or others (the
    key would not be the server's secret), empty, or not a short text file."""
    try:
        # non-blocking: a FIFO given by mistake is refused, not waited on
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"--api-key-file {path} is not a regular file")
            if mode & 0o077:
                raise ConfigError(
                    f"--api-key-file {path} has mode {stat.S_IMODE(mode):04o}: others could read the key; "
                    f"make it readable by its owner only (chmod 600 {path})"
                )
            content = file.read(KEY_FILE_LIMIT + 1)
    except OSError as exc:
        raise ConfigError(f"--api-key-file {path} cannot be read: {exc.strerror}") from exc
    if len(content) > KEY_FILE_LIMIT:
        raise ConfigError(f"--api-key-file {path} is over {KEY_FILE_LIMIT} bytes: a key file holds one key")
    lines = content.decode(errors="replace").splitlines()
    key = lines[0].strip() if lines else ""
    if not key:
        raise ConfigError(f"--api-key-file {path} is empty: write the key on its first line")
    return key


def serve_env(args: argparse.Namespace) -> int:
    from hopgym.envs.env_options import check_env_options

    api_key = served_api_key(args.api_key, args.api_key_file)
    check_exposure(args.host, api_key)
    env_kwargs = env_kwargs_from(args)
    check_env_options(args.env, env_kwargs)  # an unknown id or kwarg, before the slow imports below
    try:
        from hopgym.serving.openenv_server import ServedEnv, env_app, serving, uvicorn_server
    except ImportError as exc:
        raise ConfigError(
            f"hopgym serve env needs the serve extra: pip install 'hopgym[serve]' ({exc})"
        ) from exc
    served = ServedEnv(
        args.env, env_kwargs, args.max_sessions, args.session_timeout or None, args.allow_unisolated_code
    )
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


def serve_fleet(args: argparse.Namespace) -> int:
    from hopgym.envs.env_options import check_env_options

    api_key = served_api_key(None, args.api_key_file)
    if api_key is None:
        raise ConfigError(
            f"a fleet's servers listen on their nodes' addresses: give their key in ${API_KEY_VARIABLE} or "
            "--api-key-file PATH"
        )
    env_kwargs = env_kwargs_from(args)
    check_env_options(args.env, env_kwargs)
    try:
        from hopgym.serving.ray_fleet import EnvFleet
    except ImportError as exc:
        raise ConfigError(f"hopgym serve fleet needs hopgym[serve,ray]: ({exc})") from exc
    with EnvFleet(
        args.servers, args.env, env_kwargs, args.max_sessions, args.cpus_per_server, args.ray_address, api_key
    ) as fleet:
        print("ready: " + " ".join(f"--env-url {url}" for url in fleet.urls), flush=True)
        print(f"env: {args.env}, {args.servers} servers (Ctrl-C stops them)", flush=True)
        while True:
            time.sleep(3600)


def env_rollouts(args: argparse.Namespace) -> RolloutsFactory:
    """Where ``--env-url`` asks the episodes to play: in process, or on those servers, with the key of the
    variable ``hopgym serve env`` reads its own from."""
    from hopgym.serving.rollouts import Rollouts

    if not args.env_url:
        return Rollouts
    try:
        from hopgym.serving.remote_rollouts import on_servers
    except ImportError as exc:
        raise ConfigError(f"--env-url needs the serve extra: pip install 'hopgym[serve]' ({exc})") from exc
    return on_servers(args.env_url, os.environ.get(API_KEY_VARIABLE) or None)
