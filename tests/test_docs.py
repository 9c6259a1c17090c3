"""The README and docs/ as a user reads them: every command block says how it is tested, the ones that can
run here run as written (real data, real sandbox, real servers), links resolve, the README stays short."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hopgym.sandbox.docker.engine import connect_engine
from tests.doc_blocks import DOCUMENTS, EXCERPT, NOT_HERE, ROOT, DocBlock, doc_block, doc_blocks
from tests.sandbox.test_docker_env import missing_prerequisite as docker_env_missing
from tests.servers import model_server, viewed_episodes
from tests.shared_data import needs_data

COMMAND_LANGUAGES = {"bash", "sh", "shell", "console", "python"}
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_LINK = re.compile(r"\]\((?!https?://|mailto:)([^)#\s]*)(?:#([^)\s]*))?\)")
TIMEOUT = 300


def test_every_command_block_says_how_it_is_tested() -> None:
    readers = "\n".join(
        path.read_text() for path in (ROOT / "tests").rglob("*.py") if path.name != "doc_blocks.py"
    )
    blocks = [block for block in doc_blocks() if block.lang in COMMAND_LANGUAGES]
    assert len(blocks) >= 8
    for block in blocks:
        marker = block.marker
        assert marker is not None, f"{block.where}: a {block.lang} block without a doc-test marker"
        if marker.startswith(EXCERPT):
            source = {line.strip() for line in (ROOT / marker.removeprefix(EXCERPT)).read_text().splitlines()}
            missing = [line for line in block.text.splitlines() if line.strip() not in source]
            assert not missing, f"{block.where}: not in {marker.removeprefix(EXCERPT)}: {missing}"
            continue
        if marker == "ci" or marker.startswith(NOT_HERE):
            assert marker == "ci" or len(marker) > len(NOT_HERE) + 10, f"{block.where}: say why not here"
            continue
        assert _NAME.match(marker), f"{block.where}: marker {marker!r} is not ci, not here: ..., or a name"
        assert f'doc_block("{marker}")' in readers, f"{block.where}: no test reads doc_block({marker!r})"


def test_the_ci_blocks_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for block in doc_blocks():
        if block.marker == "ci":
            for command in block.commands():
                assert " ".join(command) in ci, f"{block.where}: .ci/run does not run {command}"


def test_the_readme_stays_short_and_every_link_resolves() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for path in DOCUMENTS:
        assert "PLACEHOLDER" not in path.read_text(), f"{path.relative_to(ROOT)} still holds a placeholder"
        for target, anchor in _LINK.findall(path.read_text()):
            linked = (path.parent / target).resolve() if target else path
            assert linked.exists(), f"{path.relative_to(ROOT)}: the link to {target} leads nowhere"
            if anchor and linked.suffix == ".md":
                where = path.relative_to(ROOT)
                assert anchor in headings(linked), f"{where}: no heading #{anchor} in {target}"


def headings(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    titles = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


def run_python(block: DocBlock, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", block.text], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, f"{block.where}: {done.stderr[-3000:]}"
    return done.stdout


def hopgym(command: list[str]) -> list[str]:
    assert command[0] == "hopgym", command
    return [sys.executable, "-m", "hopgym.cli", *command[1:]]


def run_hopgym(command: list[str], cwd: Path) -> None:
    done = subprocess.run(hopgym(command), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"


_TEST_PATH = re.compile(r"(?<![\w/.-])tests/[\w/]+\.py\b")
"""A path into the test suite as the docs, docstrings and scripts name one (not another project's)."""
_SKIPPED_DIRS = {".git", ".venv", "runs", "node_modules", "__pycache__", "hopgym.egg-info"}


def _text_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        if _SKIPPED_DIRS & set(path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix in {".py", ".md", ".sh", ".toml", ".yaml", ".cfg"} or path.name in {"Makefile", "run"}:
            found.append(path)
    return found


def test_every_test_file_a_doc_or_docstring_names_exists() -> None:
    """Test files move (the suite mirrors the package); a path left behind sends a reader nowhere."""
    files = _text_files()
    assert ROOT / "README.md" in files and ROOT / ".ci" / "run" in files
    named = {
        (path.relative_to(ROOT).as_posix(), found)
        for path in files
        for found in _TEST_PATH.findall(path.read_text(errors="replace"))
    }
    assert len(named) >= 20  # the suite is named in many places: the search itself works
    missing = sorted(f"{where}: {found}" for where, found in named if not (ROOT / found).is_file())
    assert not missing, "paths to test files that do not exist:\n" + "\n".join(missing)


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_the_use_example_steps_a_toolhop_episode(tmp_path: Path) -> None:
    printed = run_python(doc_block("use-toolhop"), tmp_path)
    assert "seccomp" in printed  # the isolation in force
    assert re.search(r"^(ok|parameter_missing|invalid_arguments|tool_error) ", printed, re.M), printed


@needs_data("familytool/familykg-e.txt")
def test_the_familytool_example_changes_the_live_kg(tmp_path: Path) -> None:
    run_python(doc_block("familytool-kg"), tmp_path)


@needs_data("fb15k-237/train2id.txt")
def test_the_kg2tool_commands_sample_and_export_fb15k237_tasks(tmp_path: Path) -> None:
    for command in doc_block("kg2tool").commands():
        run_hopgym(command, tmp_path)
    tasks = (tmp_path / "tasks.jsonl").read_text().splitlines()
    assert 14 <= len(tasks) <= 14 * 20
    assert (tmp_path / "kg2tool_sharegpt.json").read_text().startswith("[")


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_the_rollouts_example_runs_eight_episodes(tmp_path: Path) -> None:
    rewards = run_python(doc_block("rollouts"), tmp_path).strip()
    assert rewards == "[" + ", ".join(["0.0"] * 8) + "]"


@pytest.mark.xdist_group("doc-port-8766")
@needs_data("toolhop/toolhop_subset100.jsonl")
def test_the_openenv_example_serves_and_drives_an_episode(tmp_path: Path) -> None:
    (serve,) = doc_block("openenv-serve").commands()
    assert serve[-1] == "&"
    server = subprocess.Popen(hopgym(serve[:-1]), cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("ready: --base-url http://127.0.0.1:8766")
        printed = run_python(doc_block("openenv-client"), tmp_path)
        assert printed.startswith("0.0 []"), printed
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.xdist_group("doc-port-8767")
@needs_data("toolhop/toolhop_subset100.jsonl")
def test_vf_eval_runs_the_environment_module_as_the_docs_show(tmp_path: Path) -> None:
    install, serve, evaluate = doc_block("vf-eval").commands()
    assert install == ["pip", "install", "-e", "environments/hopgym_env"]
    assert importlib.metadata.distribution("hopgym-env")  # installed so by the Makefile, as the line says
    assert serve[-1] == "&" and evaluate[0] == "vf-eval"
    server = subprocess.Popen(hopgym(serve[:-1]), cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("ready: --model openai/scripted")
        vf_eval = str(Path(sys.executable).parent / "vf-eval")
        done = subprocess.run(
            [vf_eval, *evaluate[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    (results,) = tmp_path.glob("outputs/evals/*/*/results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2 and all(row["reward"] in (0.0, 1.0) for row in rows)


@pytest.mark.xdist_group("doc-port-8768")
@needs_data("toolhop/official/evaluation_closed.py")
def test_the_tooltasks_commands_run_on_a_file_of_rows(tmp_path: Path) -> None:
    serve, *commands = doc_block("tooltasks-eval").commands()
    rows = json.loads((ROOT / "envs" / "tooltasks" / "example.json").read_text())
    (tmp_path / "my_tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with model_server(*serve[3:-1]):
        for command in commands:
            if command[1] == "view":  # serves until stopped: its page lists the run
                assert viewed_episodes(command, cwd=tmp_path) == len(rows)
                continue
            done = subprocess.run(
                hopgym(command), cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
            )
            assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"
    for run in ("runs/mine", "runs/mine-normalized"):
        assert json.loads((tmp_path / run / "summary.json").read_text())["episodes"] == len(rows)


@pytest.mark.docker
def test_the_gvisor_example_runs_in_runsc_containers(tmp_path: Path) -> None:
    missing = docker_env_missing()
    if missing is None and "runsc" not in connect_engine().info()["Runtimes"]:
        missing = "gVisor's runsc is not registered with the Docker engine (.ci/docker-setup.sh does it)"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the gVisor example must run in CI: {missing}")
        pytest.skip(missing)
    assert run_python(doc_block("docker-runsc"), tmp_path).strip() == "docker[runsc]+seccomp+rlimits"
