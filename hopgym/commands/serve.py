"""``hopgym serve``: start a model server (the embedded local model, or vLLM) and keep it running."""

from __future__ import annotations

import argparse
import time

from hopgym.errors import ModelError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="start a model server and wait until it is stopped")
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


def _serve_until_stopped(server, model_string: str) -> int:
    with server:
        print(f"ready: --model {model_string} --api-base {server.api_base}", flush=True)
        print(f"log: {server.log_path}  (Ctrl-C stops the server)", flush=True)
        while server.running:
            time.sleep(1.0)
    raise ModelError(f"{server.name} stopped unexpectedly:\n{server.log_tail()}")


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
