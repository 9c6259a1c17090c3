"""hopgym: Gymnasium environments for multi-hop tool use, with every tool call in a real sandbox.

Importing the package registers the environments, so ``gym.make("ToolHop-v0")`` works after
``import hopgym`` and ``gym.make("hopgym:ToolHop-v0")`` works without it.
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from hopgym import moved

__version__ = "0.1.0"

_ENVS = {
    "ToolHop-v0": "hopgym.envs.toolhop.env:ToolHopEnv",
    "FamilyTool-v0": "hopgym.envs.familytool.env:FamilyToolEnv",
    "KGTool-v0": "hopgym.envs.kgtool.env:KGToolEnv",
    "ToolTasks-v0": "hopgym.envs.tooltasks.env:ToolTasksEnv",
}
ENV_IDS = tuple(_ENVS)

for _env_id, _entry_point in _ENVS.items():
    if _env_id not in registry:
        register(id=_env_id, entry_point=_entry_point)

moved.install()
