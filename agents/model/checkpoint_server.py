"""A trained checkpoint served on CPU for ``hopgym eval --model <folder>``: the checkpoint server
(agents/model/checkpoint_entry.py) as a child process, started, checked and stopped like the embedded
llama.cpp server (agents/model/server_process.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hopgym.agents.model.checkpoint_folder import checkpoint_model
from hopgym.agents.model.local_server import threads_from_environment
from hopgym.agents.model.server_process import ServerProcess
from hopgym.errors import ConfigError

INSTALL_HINT = "pip install 'hopgym[train]' (torch, transformers and TRL read a checkpoint as training does)"


def checkpoint_server_command(folder: Path, port: int, threads: int | None = None) -> list[str]:
    """The command line of the checkpoint server for the model in ``folder`` on 127.0.0.1."""
    command = [sys.executable, "-m", "hopgym.agents.model.checkpoint_entry", "--model", str(folder)]
    command += ["--name", served_name(folder), "--port", str(port)]
    return [*command, "--threads", str(threads)] if threads else command


def checkpoint_server(
    folder: Path, port: int | None = None, threads: int | None = None, startup_timeout: float = 300.0
) -> ServerProcess:
    """A not-yet-started server for the model ``folder`` names (a train output folder: its final model;
    see agents/model/checkpoint_folder.py). ``threads`` defaults to ``HOPGYM_LOCAL_THREADS``."""
    missing = [name for name in ("torch", "transformers", "trl") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"serving a checkpoint needs {', '.join(missing)}: {INSTALL_HINT}")
    model = checkpoint_model(folder)
    threads = threads or threads_from_environment()
    return ServerProcess.on_loopback(
        "checkpoint-server",
        lambda free: checkpoint_server_command(model, free, threads),
        port,
        startup_timeout,
        check_model=served_name(model),
    )


def served_name(folder: Path) -> str:
    """The name the server answers to: the model folder's absolute path, so the run records which
    checkpoint it evaluated (a train folder's is its newest ``checkpoint-N``)."""
    return str(folder.resolve())


def checkpoint_model_string(folder: Path) -> str:
    """The litellm provider string for the checkpoint server of the model ``folder`` names."""
    return f"openai/{served_name(checkpoint_model(folder))}"
