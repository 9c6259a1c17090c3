"""Modules and names that moved keep their old import paths (hopgym.moved): the old path warns and is the
module or object at the new one, the same object; a path that never existed still fails as Python's own
import does."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import subprocess
import sys

import pytest

from hopgym.moved import MOVED, MOVED_NAMES
from tests.extras import require_extra


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("hopgym.agents.adapters.mcp_tools", "hopgym.serving.mcp_tools"),
        ("hopgym.agents.evaluation.rollouts", "hopgym.serving.rollouts"),
        ("hopgym.agents.evaluation.run_folder", "hopgym.run_folder"),
    ],
)
def test_an_old_path_warns_and_is_the_module_at_its_new_path(old: str, new: str) -> None:
    # A fresh interpreter: in this one the old name may be imported (and its warning given) already.
    script = (
        "import warnings, importlib, hopgym\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"assert old is importlib.import_module({new!r}), (old, {new!r})\n"
        "print([str(w.message) for w in caught if w.category is DeprecationWarning])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{old} moved to {new}; import it from there" in done.stdout


def test_every_new_path_exists_and_no_old_path_has_files_left() -> None:
    """A file left at an old path would be imported instead of the moved module (two copies drifting)."""
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        parent = old.rpartition(".")[0]
        path = importlib.import_module(parent).__path__
        assert importlib.machinery.PathFinder.find_spec(old, path) is None, f"{old} has files beside {new}"


def test_a_path_that_never_existed_fails_as_python_import_does() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"hopgym\.agents\.adapterz"):
        importlib.import_module("hopgym.agents.adapterz")
    with pytest.raises(ModuleNotFoundError, match=r"hopgym\.serving\.no_such_module"):
        importlib.import_module("hopgym.agents.adapters.no_such_module")


MOVED_NAME_CASES = [(old, name, new) for old, names in MOVED_NAMES.items() for name, new in names.items()]


@pytest.mark.parametrize(("old", "name", "new"), MOVED_NAME_CASES)
def test_a_name_that_moved_out_of_a_module_warns_and_is_the_object_at_its_new_home(
    old: str, name: str, new: str
) -> None:
    if old == "hopgym.serving.verifiers_env":
        require_extra("verifiers", "verifiers")
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved to {new}; import it from there$"):
        moved = getattr(importlib.import_module(old), name)
    assert moved is getattr(importlib.import_module(new), name)
    assert name not in vars(importlib.import_module(old)), f"{old} defines {name} beside {new}: two copies"


def test_a_name_that_never_existed_fails_as_python_import_does() -> None:
    with pytest.raises(ImportError, match=r"cannot import name 'task_rowz' from 'hopgym.train.dataset'"):
        from hopgym.train.dataset import task_rowz  # type: ignore[attr-defined]  # noqa: F401
    with pytest.raises(
        AttributeError, match=r"module 'hopgym.serving.rollouts' has no attribute 'TaskStarts'"
    ):
        _ = importlib.import_module("hopgym.serving.rollouts").TaskStarts
