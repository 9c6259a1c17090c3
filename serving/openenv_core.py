"""The openenv names hopgym's OpenEnv server and client use, imported without Gradio.

openenv's package imports its Gradio web interface whenever Gradio is installed (openenv requires
it), and falls back to none when Gradio cannot be imported. hopgym's server never mounts that interface and
its client never shows one, while Gradio's import costs about 5 s of CPU in every process that loads openenv
(each server, each client). So Gradio is kept out while openenv's package loads, and only then: a later
``import gradio``, or openenv's ``create_app`` mounting the interface under ``ENABLE_WEB_INTERFACE``, imports
it as before."""

from __future__ import annotations

import importlib
import sys

GRADIO = "gradio"


def _import_openenv_without_gradio() -> None:
    """Import ``openenv.core`` while ``import gradio`` fails (a ``None`` in ``sys.modules`` makes it raise
    ``ModuleNotFoundError``, which openenv catches); a Gradio already imported is left as it is."""
    absent = GRADIO not in sys.modules
    if absent:
        sys.modules[GRADIO] = None  # type: ignore[assignment]
    try:
        importlib.import_module("openenv.core")
    finally:
        if absent:
            del sys.modules[GRADIO]


_import_openenv_without_gradio()

# ruff: noqa: E402 - the imports below find openenv.core loaded
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State

__all__ = [
    "Action",
    "CallToolAction",
    "CallToolObservation",
    "EnvClient",
    "Environment",
    "EnvironmentMetadata",
    "ListToolsAction",
    "ListToolsObservation",
    "MCPEnvironment",
    "Observation",
    "State",
    "StepResult",
    "Tool",
    "ToolError",
    "ToolErrorType",
    "create_app",
]
