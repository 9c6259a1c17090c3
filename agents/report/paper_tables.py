"""A run's results in its env's paper layouts (``ChatToolEnv.paper_tables``), read from its run folder."""

from __future__ import annotations

from pathlib import Path

from hopgym.agents.evaluation.records import EPISODES_FILE, RUN_FILE, read_episodes
from hopgym.envs.env_options import env_class
from hopgym.errors import ConfigError
from hopgym.run_folder import read_json


def paper_tables_for_run(out: Path) -> str | None:
    """The tables of a finished run folder, or None when its env's paper has none (or hopgym no longer
    registers the env)."""
    run = read_json(Path(out) / RUN_FILE)
    if run is None:
        return None
    try:
        env = env_class(str(run.get("env")), import_module=False)  # a run folder imports no code
    except ConfigError:
        return None
    metrics = [record.metrics or {} for record in read_episodes(Path(out) / EPISODES_FILE)]
    return env.paper_tables(metrics, run)
