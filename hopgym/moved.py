"""Import paths of modules that moved, kept working: importing an old one warns (DeprecationWarning) and
gives the module at its new path, the same object, so a user's code and saved pickles keep loading."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "hopgym.agents.adapters": "hopgym.serving",
    "hopgym.agents.evaluation.rollouts": "hopgym.serving.rollouts",
    "hopgym.agents.evaluation.run_folder": "hopgym.run_folder",
}
"""Old module path (and everything below it) -> its new path (issue 38's serving layer)."""


def new_name(old: str) -> str | None:
    """Where module ``old`` lives now, or None if it did not move."""
    for before, after in MOVED.items():
        if old == before or old.startswith(before + "."):
            return after + old.removeprefix(before)
    return None


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
