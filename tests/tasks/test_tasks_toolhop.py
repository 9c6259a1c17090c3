"""The ToolHop loader on the real 100-row subset and on a hand-made official-format file."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from hopgym.errors import DataError, DownloadError
from hopgym.tasks.tool_source import compile_tool_code, read_tool_source
from hopgym.tasks.toolhop import hub
from hopgym.tasks.toolhop.gold_calls import parse_gold_call
from hopgym.tasks.toolhop.loader import load_toolhop
from tests.paths import FIXTURES
from tests.shared_data import SUBSET, needs_data

FIXTURE = FIXTURES / "toolhop" / "official_sample.json"
DATA_ROOT = os.environ.get("HOPGYM_DATA")
needs_subset = needs_data("toolhop/toolhop_subset100.jsonl")


@pytest.fixture(scope="module")
def subset_tasks():
    return load_toolhop(SUBSET)


@needs_subset
def test_subset_loads_every_row_with_ids_hops_and_schemas(subset_tasks):
    assert len(subset_tasks) == 100
    assert [t.id for t in subset_tasks][:2] == ["toolhop-001", "toolhop-002"]
    rows = [json.loads(line) for line in SUBSET.read_text().splitlines()]
    for task, row in zip(subset_tasks, rows, strict=True):
        assert task.hops == row["hop_count"] == len(row["sub_task"])
        assert task.answer == row["answer"] and task.question == row["question"]
        assert task.metadata["source_id"] == row["source_id"]
        assert set(task.tool_names) == {doc["name"] for doc in row["tools"].values()}
        for tool in task.tools:
            assert tool["type"] == "function"
            assert set(tool["function"]) == {"name", "description", "parameters"}


@needs_subset
def test_subset_sources_keep_definitions_and_drop_example_usage(subset_tasks):
    for task in subset_tasks:
        for source in task.tool_sources:
            body = ast.parse(source).body
            assert all(
                isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign))
                for n in body
            )
            assert not any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) for n in body)
    # toolhop-001 function 0 ends with "response = genealogy_query(...)\nprint(response)" upstream.
    assert "print(response)" not in subset_tasks[0].tool_sources[0]
    assert "def genealogy_query(" in subset_tasks[0].tool_sources[0]


@needs_subset
def test_subset_tools_are_compiled_once_with_the_tasks(subset_tasks):
    """Each cleaned source is compiled when the file is parsed, so that no episode's worker compiles it."""
    for task in subset_tasks:
        assert task.tool_code == tuple(
            compile_tool_code(source, index) for index, source in enumerate(task.tool_sources)
        )
        assert None not in task.tool_code
    assert compile_tool_code("return 1", 0) is None, "what does not compile is left to the worker to report"


@needs_subset
def test_subset_duplicate_names_offer_the_document_of_the_last_definition(subset_tasks):
    duplicated = {t.id: t.duplicate_tools for t in subset_tasks if t.duplicate_tools}
    assert len(duplicated) == 7
    assert duplicated["toolhop-035"] == ("genealogy_query",)
    for task in subset_tasks:
        if not task.duplicate_tools:
            assert len(task.tools) == task.hops
            continue
        signatures = {}
        for source in task.tool_sources:
            signatures.update(read_tool_source(source).signatures)
        for tool in task.tools:
            if tool["function"]["name"] in task.duplicate_tools:
                declared = set(tool["function"]["parameters"]["properties"])
                assert declared == set(signatures[tool["function"]["name"]])


@needs_subset
def test_subset_gold_calls_bind_positional_arguments(subset_tasks):
    with_gold = [t for t in subset_tasks if t.gold_calls]
    assert len(with_gold) == 22
    by_id = {t.id: t for t in with_gold}
    last = by_id["toolhop-015"].gold_calls[-1]
    assert (last.name, last.arguments) == ("extract_last_name", {"full_name": "Oliver Russell"})
    assert by_id["toolhop-019"].gold_calls[-1].arguments == {"years": [1926]}


def test_official_list_format_uses_row_position_as_id_and_dedupes_tools():
    tasks = load_toolhop(FIXTURE)
    assert [t.id for t in tasks] == ["0", "1"]
    first = tasks[0]
    assert first.hops == 3 and first.domain == "Literature"
    assert first.tool_names == ("reverse_text", "name_part")
    assert first.duplicate_tools == ("name_part",)
    name_part = next(t for t in first.tools if t["function"]["name"] == "name_part")
    assert "second version" in name_part["function"]["description"]
    assert first.metadata == {"answer_type": "string", "previous_answer_type": "string"}


def test_cleaning_keeps_imports_and_constants_and_drops_calls_prints_and_main_guard():
    tasks = load_toolhop(FIXTURE)
    reverse, name_v1, name_v2 = tasks[0].tool_sources
    assert "print(" not in reverse and "# Example usage" not in reverse
    assert "import string" in name_v1 and "SEPARATOR = ' '" in name_v1 and "result =" not in name_v1
    assert "__main__" not in name_v2
    namespace: dict = {}
    exec(reverse, namespace)  # the cleaned code only defines; nothing is printed or called
    assert namespace["reverse_text"]("abc") == "cba"


def test_cleaning_handles_statements_sharing_a_line():
    cleaned = read_tool_source(
        "def f(x):\n    return x\nLIMIT = 3; print(f(LIMIT))\nimport os; os.getcwd()\n"
    )
    assert "print" not in cleaned.code and "getcwd" not in cleaned.code
    assert "def f(x)" in cleaned.code and "import os" in cleaned.code and "LIMIT = 3" in cleaned.code
    assert cleaned.signatures == {"f": ["x"]}


def test_invalid_python_names_the_row():
    with pytest.raises(DataError, match="task 7, function 0"):
        read_tool_source("def broken(:\n", "task 7, function 0")


def test_gold_call_parsing_errors_are_clear():
    signatures = {"f": ["a", "b"]}
    assert parse_gold_call("f(1, b=[2])", signatures).arguments == {"a": 1, "b": [2]}
    with pytest.raises(DataError, match="none of the task's functions"):
        parse_gold_call("g(1)", signatures)
    with pytest.raises(DataError, match="3 positional"):
        parse_gold_call("f(1, 2, 3)", signatures)
    with pytest.raises(DataError, match="not a literal"):
        parse_gold_call("f(x)", signatures)
    with pytest.raises(DataError, match="twice"):
        parse_gold_call("f(1, a=2)", signatures)


def test_jsonl_and_json_list_give_the_same_tasks(tmp_path):
    rows = json.loads(FIXTURE.read_text())
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps(dict(row, id=f"r{i}")) for i, row in enumerate(rows)) + "\n")
    from_list, from_lines = load_toolhop(FIXTURE), load_toolhop(jsonl)
    assert [t.id for t in from_lines] == ["r0", "r1"]
    assert [t.tools for t in from_list] == [t.tools for t in from_lines]


def test_loading_a_file_again_reuses_its_tasks_until_the_file_changes(tmp_path):
    rows = json.loads(FIXTURE.read_text())
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(dict(rows[0], id="first")) + "\n")
    first, again = load_toolhop(path), load_toolhop(str(path))
    assert first[0] is again[0]  # parsed once, shared by every env of a run
    again.clear()  # each caller gets its own list
    assert [task.id for task in load_toolhop(path)] == ["first"]
    path.write_text("".join(json.dumps(dict(row, id=f"new{i}")) + "\n" for i, row in enumerate(rows)))
    assert [task.id for task in load_toolhop(path)] == ["new0", "new1"]


def test_bad_files_raise_data_errors(tmp_path):
    with pytest.raises(DataError, match="is not a file"):
        load_toolhop(tmp_path / "missing.json")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n\n{not json}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:3: not a JSON row \(Expecting property name"):
        load_toolhop(bad)  # the real line number, blank lines counted
    broken_list = tmp_path / "bad.json"
    broken_list.write_text("[{")
    with pytest.raises(DataError, match="is not a valid JSON list"):
        load_toolhop(broken_list)
    incomplete = tmp_path / "incomplete.jsonl"
    incomplete.write_text(json.dumps({"id": "x", "question": "q"}) + "\n")
    with pytest.raises(DataError, match="row x: missing fields"):
        load_toolhop(incomplete)


# -- data path resolution and download ---------------------------------------------------------------


@pytest.fixture
def isolated_locations(tmp_path, monkeypatch):
    """No HOPGYM_DATA and an empty user cache under tmp_path."""
    monkeypatch.delenv("HOPGYM_DATA", raising=False)
    monkeypatch.setattr(hub, "cache_dir", lambda: tmp_path / "cache" / "toolhop")
    return tmp_path


def _fake_hub(source: Path, calls: list):
    """Stands in for ``hf_hub_download``: the network cannot reach the hub here."""

    def download(*, repo_id, filename, repo_type, revision, local_dir):
        calls.append((repo_id, filename, repo_type, revision))
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return str(target)

    return download


def test_download_path_fetches_into_the_cache_then_reuses_it(isolated_locations, monkeypatch):
    calls: list = []
    monkeypatch.setattr(hub, "hf_hub_download", _fake_hub(FIXTURE, calls))
    monkeypatch.setattr(hub, "HUB_SHA256", hashlib.sha256(FIXTURE.read_bytes()).hexdigest())
    monkeypatch.setattr(hub.download_toolhop, "__defaults__", (hub.HUB_SHA256,))
    tasks = load_toolhop()
    assert len(tasks) == 2
    assert calls == [("bytedance-research/ToolHop", "data/ToolHop.json", "dataset", hub.HUB_REVISION)]
    cached = isolated_locations / "cache" / "toolhop" / "data" / "ToolHop.json"
    assert cached.is_file()
    assert len(load_toolhop()) == 2 and len(calls) == 1  # second load reads the cache


def test_download_with_a_wrong_digest_is_rejected_and_removed(isolated_locations, monkeypatch):
    monkeypatch.setattr(hub, "hf_hub_download", _fake_hub(FIXTURE, []))
    with pytest.raises(DownloadError, match="sha256"):
        load_toolhop()
    assert not (isolated_locations / "cache" / "toolhop" / "data" / "ToolHop.json").exists()


def test_download_failure_is_a_download_error(isolated_locations, monkeypatch):
    def unreachable(**kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(hub, "hf_hub_download", unreachable)
    with pytest.raises(DownloadError, match="network unreachable"):
        load_toolhop()


def test_hopgym_data_without_toolhop_files_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HOPGYM_DATA", str(tmp_path))
    with pytest.raises(DataError, match="holds none of"):
        load_toolhop()


@needs_subset
def test_hopgym_data_resolves_to_the_subset(monkeypatch):
    monkeypatch.setenv("HOPGYM_DATA", DATA_ROOT)
    assert hub.resolve_toolhop_path() == SUBSET
