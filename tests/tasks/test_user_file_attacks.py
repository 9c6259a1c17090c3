"""Files a user names to hopgym are untrusted (tasks/user_files.py): ``/dev/zero``, a FIFO nobody writes, a
directory and a link to a sparse file over the cap are each refused with a DataError naming the file and the
rule, through every env's data path and KG file and through ``hopgym eval --data``; nothing hangs or fills
memory, and a good file works afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401  (registers the envs)
from hopgym.errors import DataError
from hopgym.tasks.kg2tool.generated_tools import (
    GENERATED_DIR,
    MODULE_FILE,
    TOOLS_FILE,
    read_tools,
    write_tools,
)
from hopgym.tasks.toolhop.official import official_prompt_templates
from hopgym.tasks.user_files import MAX_USER_FILE_BYTES, read_user_bytes, read_user_text
from tests.shared_data import DATA, SUBSET, needs_data

HANG_GUARD = 60.0
"""Seconds after which a read counts as hung (a guard only: a refusal comes at once on any machine)."""


def _hostile(kind: str, tmp_path: Path, name: str = "tasks.jsonl") -> tuple[Path, str]:
    """A path ``tmp_path/name`` of ``kind`` and the words its refusal must hold."""
    path = tmp_path / name
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return path, "a character device"
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever writes: a plain open would wait forever
        return path, "a FIFO"
    if kind == "directory":
        path.mkdir()
        return path, "a directory"
    sparse = tmp_path / "huge.jsonl"
    with sparse.open("wb") as handle:
        handle.truncate(MAX_USER_FILE_BYTES + 1)  # a hole: no disk used, 1 GiB + 1 byte long
    path.symlink_to(sparse)
    return path, f"over the {MAX_USER_FILE_BYTES:,} hopgym reads"


KINDS = ["dev-zero", "fifo", "directory", "link-to-sparse"]


def _refused_within_guard(call: Callable[[], Any]) -> BaseException:
    """What ``call`` raised, run on a daemon thread so that a hang fails the test instead of the suite."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), "reading the file hung"
    assert outcome, "the hostile file was accepted"
    return outcome[0]


ENV_PATHS = [
    pytest.param("ToolTasks-v0", "data_path", None, {}, id="tooltasks"),
    pytest.param("ToolHop-v0", "data_path", None, {}, id="toolhop"),
    pytest.param("FamilyTool-v0", "data_path", None, {}, id="familytool"),
    pytest.param("KGTool-v0", "data_path", None, {"kg": "family-e"}, id="kgtool-tasks"),
    pytest.param("KGTool-v0", "kg_path", "familykg-e.txt", {"kg": "family-e", "n": 1}, id="kgtool-kg-file"),
]
"""Env id, the kwarg naming a file (or, with a file name, the folder holding that file), env kwargs."""


@needs_data("toolhop/toolhop_subset100.jsonl")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("env_id", "key", "inside", "kwargs"), ENV_PATHS)
def test_a_hostile_data_file_is_refused_naming_it(
    env_id: str, key: str, inside: str | None, kwargs: dict[str, Any], kind: str, tmp_path: Path
) -> None:
    path, words = _hostile(kind, tmp_path, inside or "tasks.jsonl")
    named = tmp_path if inside else path
    error = _refused_within_guard(lambda: gym.make(env_id, **{key: str(named)}, **kwargs))
    assert isinstance(error, DataError), repr(error)
    assert words in str(error)
    assert str(path) in str(error) or str(path.resolve()) in str(error)  # the file named, or what it links to
    env = gym.make("ToolTasks-v0", data_path=str(SUBSET))  # the env still works
    observation, _ = env.reset(options={"index": 0})
    assert observation["messages"]
    env.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_refuses_each_kind_and_reads_a_regular_file(kind: str, tmp_path: Path) -> None:
    path, words = _hostile(kind, tmp_path)
    error = _refused_within_guard(lambda: read_user_bytes(path, "test file"))
    assert isinstance(error, DataError) and words in str(error) and "test file" in str(error)
    good = tmp_path / "good.txt"
    good.write_text("héllo\n", encoding="utf-8")
    assert read_user_text(good, "test file") == "héllo\n"


def test_a_file_over_a_cap_is_refused_and_one_at_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"x" * 100)
    assert read_user_bytes(path, "test file", cap=100) == b"x" * 100
    with pytest.raises(DataError, match="holds 100 bytes or more, over the 99"):
        read_user_bytes(path, "test file", cap=99)


def test_text_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(DataError, match=r"rows.jsonl' is not UTF-8 text \(byte 7\)"):
        read_user_text(path, "test file")


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_hopgym_eval_with_a_fifo_as_data_fails_at_once_naming_it(tmp_path: Path) -> None:
    """The run's start check reads the file before any model starts (no model is needed to see it)."""
    fifo, _ = _hostile("fifo", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "hopgym.cli", "eval", "--env", "ToolTasks-v0", "--data", str(fifo),
         "--model", "local", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=HANG_GUARD, env={**os.environ, "HOPGYM_DATA": str(DATA)},
    )  # fmt: skip
    assert done.returncode != 0
    assert f"the ToolTasks file {str(fifo)!r} is a FIFO" in done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_generated_tools_refuse_each_kind_as_tools_json_and_read_a_good_folder(
    kind: str, tmp_path: Path
) -> None:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / MODULE_FILE).write_text("")
    _, words = _hostile(kind, folder, TOOLS_FILE)
    error = _refused_within_guard(lambda: read_tools(folder))
    assert isinstance(error, DataError) and words in str(error) and "generated tool documents" in str(error)
    write_tools(read_tools(GENERATED_DIR / "family-e"), tmp_path / "good")
    assert read_tools(tmp_path / "good") == read_tools(GENERATED_DIR / "family-e")


@needs_data("familytool/familykg-e.txt")
def test_hopgym_tools_check_refuses_a_fifo_in_the_folder_it_compares(tmp_path: Path) -> None:
    """``hopgym tools generate --check --out DIR`` reads DIR's files: a FIFO there is named, not waited on."""
    folder = tmp_path / "tools"
    folder.mkdir()
    fifo, _ = _hostile("fifo", folder, TOOLS_FILE)
    check = [sys.executable, "-m", "hopgym.cli", "tools", "generate", "--kg", "family-e", "--check", "--out"]
    done = subprocess.run([*check, str(folder)], capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 2, done.stderr
    assert f"the generated tools file {str(fifo)!r} is a FIFO" in done.stderr
    fifo.unlink()
    write_tools(read_tools(GENERATED_DIR / "family-e"), folder)
    done = subprocess.run([*check, str(folder)], capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0 and "up to date" in done.stdout, done.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_the_official_script_refuses_each_kind(kind: str, tmp_path: Path) -> None:
    path, words = _hostile(kind, tmp_path, "evaluation_closed.py")
    error = _refused_within_guard(lambda: official_prompt_templates(path))
    assert isinstance(error, DataError) and words in str(error) and "official ToolHop script" in str(error)


@needs_data("toolhop/official/evaluation_closed.py")
def test_the_official_script_read_once_is_still_pinned_and_parsed(tmp_path: Path) -> None:
    """One read gives both the bytes hashed and the bytes parsed: a copy with one byte more is refused by
    the pin, the real script parses."""
    real = DATA / "toolhop" / "official" / "evaluation_closed.py"
    copy = tmp_path / "evaluation_closed.py"
    copy.write_bytes(real.read_bytes().replace(b"def ", b"def  ", 1))
    with pytest.raises(DataError, match="not the pinned official script's"):
        official_prompt_templates(copy)
    assert official_prompt_templates(real)
