"""Import paths of modules and names that moved, kept working: importing an old one warns
(DeprecationWarning) and gives the module or object at its new path, the same object, so a user's code and
saved pickles keep loading."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

MOVED = {
    "hopgym.agents.adapters": "hopgym.serving",
    "hopgym.agents.evaluation.rollouts": "hopgym.serving.rollouts",
    "hopgym.agents.evaluation.run_folder": "hopgym.run_folder",
}
"""Old module path (and everything below it) -> its new path (issue 38's serving layer)."""

MOVED_NAMES = {
    "hopgym.train.dataset": dict.fromkeys(
        ("TASK_KEY", "select_tasks", "task_of_prompt"), "hopgym.serving.task_rows"
    ),
    "hopgym.serving.rollouts": dict.fromkeys(("TaskStart", "task_starts"), "hopgym.serving.task_rows"),
    "hopgym.serving.verifiers_env": {"tool_def": "hopgym.serving.task_rows"},
}
"""Module -> its names that moved out of it -> the module that holds each now (issue 38's one task-row
builder). The old module reads them through :func:`moved_names`."""


def new_name(old: str) -> str | None:
    """Where module ``old`` lives now, or None if it did not move."""
    for before, after in MOVED.items():
        if old == before or old.startswith(before + "."):
            return after + old.removeprefix(before)
    return None


def moved_names(module: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``module``: a name that moved out of it (:data:`MOVED_NAMES`) warns and
    is the object at its new home; any other missing name is Python's own AttributeError."""

    def __getattr__(name: str) -> Any:
        new = MOVED_NAMES.get(module, {}).get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2
        )
        return getattr(importlib.import_module(new), name)

    return __getattr__


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new path."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return None if new_name(fullname) is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new path has run already."""


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): the old paths have no files any more."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
