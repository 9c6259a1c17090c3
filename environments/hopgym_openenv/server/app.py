"""The OpenEnv package's server: ``app`` for ``uvicorn server.app:app`` (openenv.yaml's ``app``), serving the
env named by ``HOPGYM_OPENENV_ENV`` (default ToolHop-v0) on 127.0.0.1's defaults, and ``main`` for the
package's ``server`` script, which is ``hopgym serve env`` with its checks (data, sandbox, API key)."""

from __future__ import annotations

import os
import sys

from hopgym.cli import main as hopgym_main
from hopgym.serving.openenv_server import ServedEnv, env_app

ENV_VARIABLE = "HOPGYM_OPENENV_ENV"

app = env_app(ServedEnv(os.environ.get(ENV_VARIABLE, "ToolHop-v0")))


def main() -> int:
    """``hopgym serve env`` with this script's arguments (default: ``--env`` from the environment)."""
    arguments = sys.argv[1:] or ["--env", os.environ.get(ENV_VARIABLE, "ToolHop-v0")]
    return hopgym_main(["serve", "env", *arguments])


if __name__ == "__main__":
    sys.exit(main())
