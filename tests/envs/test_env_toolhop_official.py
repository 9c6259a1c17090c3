"""ToolHop-v0 under protocol="official" (the default): the official templates and their download path,
the run-stopping calls, minimal feedback, what the agents send, and each deliberate difference from the
official code, shown beside the official code's own answer (tests/official_toolhop.py runs it)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.envs.feedback import MINIMAL_HINT
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.errors import ConfigError, DataError, DownloadError
from hopgym.sandbox import make_sandbox
from hopgym.tasks.toolhop import hub, official
from hopgym.tasks.toolhop.loader import read_rows
from hopgym.tasks.toolhop.official import official_prompt_templates, prompt_templates_from_source
from tests.paths import FIXTURES, TESTS
from tests.shared_data import DATA, SUBSET, needs_data

TOOLHOP_FIXTURES = FIXTURES / "toolhop"
QUIRKS = TOOLHOP_FIXTURES / "official_quirks.jsonl"
OFFICIAL = DATA / "toolhop" / "official" / "evaluation_closed.py"
RUNNER = TESTS / "official_toolhop.py"
needs_official = needs_data("toolhop/official/evaluation_closed.py")
needs_subset = needs_data("toolhop/toolhop_subset100.jsonl")


def calls_message(*calls):
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def call(name, arguments, call_id="c1"):
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def official_tool_texts(row: dict, calls: list[dict], tmp_path: Path) -> list[str]:
    """The tool messages the unchanged official code produces for one turn of ``calls``."""
    replies = [calls_message(*calls), {"role": "assistant", "content": "done"}]
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"row": row, "scenario": "Mandatory", "replies": replies}]))
    results = tmp_path / "results.json"
    completed = subprocess.run(
        [sys.executable, str(RUNNER), str(cases), str(results)],
        env={"HOPGYM_DATA": str(DATA), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    [result] = json.loads(results.read_text())
    return [m["content"] for m in result["messages"] if m["role"] == "tool"]


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


def ours(sandbox, data_path: Path, task_id: str, calls: list[dict], **kwargs) -> tuple[list[str], dict]:
    env = ToolHopEnv(data_path=data_path, sandbox=sandbox, **kwargs)
    try:
        env.reset(options={"task_id": task_id})
        observation, _, _, _, info = env.step(calls_message(*calls))
        return [m["content"] for m in observation["messages"] if m["role"] == "tool"], info
    finally:
        env.close()


# -- the templates: read from the official script, else the cache, else the pinned download ------------


SELF_MADE = """
def sample_process_direct(sample, args):
    messages = [{"role": "user", "content": f"Answer {{briefly}}: {sample['question']}"}]

def sample_process_mandatory(sample, args):
    messages = [{"role": "user", "content": f"Use the tools.\\nQ: {sample['question']} (go)"}]

def sample_process_free(sample, args):
    messages = [{"role": "user", "content": f"Tools are optional. {sample['question']}"}]
"""


def test_templates_are_read_from_the_f_strings_of_the_script() -> None:
    templates = prompt_templates_from_source(SELF_MADE, "self-made.py")
    assert templates["direct"].render("Why?") == "Answer {briefly}: Why?"
    assert templates["mandatory"].render("Who?") == "Use the tools.\nQ: Who? (go)"
    assert templates["free"].render("{x}") == "Tools are optional. {x}"


def test_a_script_that_is_not_the_official_one_is_refused() -> None:
    with pytest.raises(DataError, match="no function sample_process_free"):
        prompt_templates_from_source(SELF_MADE.split("def sample_process_free")[0], "cut.py")
    with pytest.raises(DataError, match="unexpected placeholder"):
        prompt_templates_from_source(SELF_MADE.replace("sample['question']", "sample['answer']"), "bad.py")


@pytest.fixture
def no_local_script(tmp_path, monkeypatch):
    """No HOPGYM_DATA and an empty user cache under tmp_path."""
    monkeypatch.delenv("HOPGYM_DATA", raising=False)
    monkeypatch.setattr(official, "cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def _local_hub(source: Path, calls: list):
    """Serves ``source`` in place of the hub (the network cannot reach it here)."""

    def download(*, repo_id, filename, repo_type, revision, local_dir):
        calls.append((repo_id, filename, repo_type, revision))
        target = Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return str(target)

    return download


def test_download_path_fetches_the_pinned_script_into_the_cache_then_reuses_it(
    no_local_script, tmp_path, monkeypatch
) -> None:
    served = tmp_path / "served.py"
    served.write_text(SELF_MADE)
    calls: list = []
    monkeypatch.setattr(hub, "hf_hub_download", _local_hub(served, calls))
    monkeypatch.setattr(official, "OFFICIAL_SHA256", hashlib.sha256(served.read_bytes()).hexdigest())
    path = official.official_script_path()
    assert path == no_local_script / "code" / "evaluation_closed.py" and path.read_text() == SELF_MADE
    assert calls == [("bytedance-research/ToolHop", "code/evaluation_closed.py", "dataset", hub.HUB_REVISION)]
    assert official_prompt_templates()["free"].render("Q") == "Tools are optional. Q"
    assert official.official_script_path() == path and len(calls) == 1  # the cache is reused


def test_a_download_with_another_digest_is_removed(no_local_script, tmp_path, monkeypatch) -> None:
    served = tmp_path / "served.py"
    served.write_text(SELF_MADE)
    monkeypatch.setattr(hub, "hf_hub_download", _local_hub(served, []))
    with pytest.raises(DownloadError, match="sha256"):
        official.official_script_path()
    assert not (no_local_script / "code" / "evaluation_closed.py").exists()


def test_a_local_script_with_another_digest_is_refused(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "toolhop" / "official"
    folder.mkdir(parents=True)
    (folder / "evaluation_closed.py").write_text(SELF_MADE)
    monkeypatch.setenv("HOPGYM_DATA", str(tmp_path))
    with pytest.raises(DataError, match="not the pinned official script"):
        official_prompt_templates()


@needs_official
def test_hopgym_data_holds_the_pinned_script(monkeypatch) -> None:
    monkeypatch.setenv("HOPGYM_DATA", str(DATA))
    assert official.official_script_path() == OFFICIAL
    assert set(official_prompt_templates()) == {"direct", "mandatory", "free"}


# -- the env -----------------------------------------------------------------------------------------


@needs_official
@pytest.mark.parametrize("scenario", ["mandatory", "free", "direct"])
def test_check_env_passes(sandbox, scenario) -> None:
    env = ToolHopEnv(data_path=SUBSET, scenario=scenario, sandbox=sandbox)
    check_env(env.unwrapped)
    env.close()


@needs_official
@needs_subset
def test_duplicate_names_offer_both_documents(sandbox) -> None:
    env = ToolHopEnv(data_path=SUBSET, sandbox=sandbox)
    observation, info = env.reset(options={"task_id": "toolhop-035"})
    names = [tool["function"]["name"] for tool in observation["tools"]]
    assert names.count("genealogy_query") == 2 and info["duplicate_tools"] == ["genealogy_query"]
    env.close()


@needs_official
def test_a_timeout_or_system_exit_ends_the_episode_unscored(sandbox) -> None:
    for name, reason in (("spin", "timed out"), ("leave", "SystemExit")):
        env = ToolHopEnv(data_path=QUIRKS, sandbox=sandbox, call_timeout=1.0)
        env.reset(options={"index": 0})
        _, reward, terminated, truncated, info = env.step(
            calls_message(call(name, {}, "a"), call("tally", "{}", "b"))
        )
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert reason in info["stopped"] and [r["id"] for r in info["calls"]] == ["a"]  # the rest never ran
        env.close()


@needs_official
def test_minimal_feedback_hides_official_failures_only(sandbox) -> None:
    texts, info = ours(
        sandbox,
        QUIRKS,
        "quirks-1",
        [call("tally", {"word": "tool"}, "a"), call("tally", "", "b"), call("nope", {}, "c")],
        feedback="minimal",
    )
    assert texts == ["4", MINIMAL_HINT, MINIMAL_HINT]
    assert [r["status"] for r in info["calls"]] == ["ok", "invalid_arguments", "tool_hallucination"]


@needs_official
def test_the_direct_reply_is_final_whatever_it_holds() -> None:
    # The official direct scenario makes one model call and scores its content; nothing runs.
    env = ToolHopEnv(data_path=QUIRKS, scenario="direct")
    observation, info = env.reset(options={"index": 0})
    assert observation["tools"] == [] and info["tool_choice"] is None and env.sandbox is None
    action = {
        "role": "assistant",
        "content": "<answer>4</answer>",
        "tool_calls": [call("tally", {"word": "x"})],
    }
    _, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["calls"], info["turn"]) == (1.0, True, False, [], 1)
    env.close()


def test_unknown_protocol_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown protocol"):
        ToolHopEnv(data_path=QUIRKS, scenario="direct", protocol="paper")


# -- the deliberate differences, each beside the official code's answer ------------------------------


@needs_official
@needs_subset
def test_module_globals_of_the_official_script_do_not_leak_into_tools(sandbox, tmp_path) -> None:
    [row] = [row for row in read_rows(SUBSET) if row["id"] == "toolhop-071"]
    arguments = {"name": "Sir Charles Comyn Egertong", "date_range": ["1800-01-01", "1900-01-01"]}
    calls = [call("historical_rank_finder", arguments)]
    assert official_tool_texts(row, calls, tmp_path) == [
        "an error occured when call historical_rank_finder: module 'datetime' has no attribute 'strptime'"
    ]
    texts, _ = ours(sandbox, SUBSET, "toolhop-071", calls)
    assert texts == ["an error occured when call historical_rank_finder: name 'datetime' is not defined"]


@needs_official
def test_trailing_example_code_does_not_run_again_on_each_call(sandbox, tmp_path) -> None:
    [row] = read_rows(QUIRKS)
    calls = [call("tally", {"word": "tool"})]
    assert official_tool_texts(row, calls, tmp_path) == [
        "an error occured when call tally: the example usage failed"
    ]
    assert ours(sandbox, QUIRKS, "quirks-1", calls)[0] == ["4"]


@needs_official
def test_builtins_are_not_tools(sandbox, tmp_path) -> None:
    [row] = read_rows(QUIRKS)
    calls = [call("print", {"sep": "-"}), call("len", '{"obj": "x"}', "c2")]
    assert official_tool_texts(row, calls, tmp_path) == [
        "null",
        "an error occured when call len: len() takes no keyword arguments",
    ]
    texts, info = ours(sandbox, QUIRKS, "quirks-1", calls)
    assert texts == [
        "an error occured when call print: name 'print' is not defined",
        "an error occured when call len: name 'len' is not defined",
    ]
    assert [r["status"] for r in info["calls"]] == ["tool_hallucination", "tool_hallucination"]


# -- what the agents send ----------------------------------------------------------------------------


@needs_official
@needs_subset
def test_fc_agent_sends_the_official_request_and_the_summary_names_the_protocol(tmp_path) -> None:
    def policy(request):
        if any(m["role"] == "tool" for m in request["messages"]):
            return ScriptedReply(content="<answer>15</answer>")
        return ScriptedReply(tool_calls=(tool_call("date_digit_sum", {"date_input": "11 July 1302"}),))

    for max_tokens, expected in ((None, 256), (64, 64)):
        out = tmp_path / f"run{expected}"
        with ScriptedModelServer(policy) as server:
            model = ModelConfig(server.model, api_base=server.api_base, api_key="sk", max_tokens=max_tokens)
            EvalRun(EvalConfig(out=out, model=model, limit=1, progress=False)).run()
            requests = server.requests
        assert [r["max_tokens"] for r in requests] == [expected, expected]
        assert all(r["temperature"] == 0 and "tool_choice" not in r for r in requests)
        assert [m["role"] for m in requests[0]["messages"]] == ["user"]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["answer_correctness"] == 1.0 and "protocol" not in summary  # a setting of the run
        assert "# ToolHop-v0 · official protocol · fc" in (out / "summary.md").read_text()


@needs_subset
@pytest.mark.parametrize(
    "name, arguments",
    [
        (["not", "hashable"], "{}"),
        ({"a": 1}, "{}"),
        (None, "[" * 100_000),
        (None, '{"x": ' + "9" * 5000 + "}"),
    ],
    ids=["list-name", "dict-name", "deep-nesting", "huge-integer"],
)
def test_hostile_names_and_arguments_are_recorded_errors_under_the_official_protocol(
    sandbox, name, arguments
) -> None:
    """The official executor looks names up and parses arguments itself: hostile ones become the
    official error text on a recorded call, and the episode goes on."""
    env = ToolHopEnv(data_path=SUBSET, sandbox=sandbox)
    try:
        observation, _ = env.reset(options={"index": 0})
        real = observation["tools"][0]["function"]["name"]
        hostile = {"id": "c1", "type": "function", "function": {"name": name or real, "arguments": arguments}}
        _, _, terminated, _, info = env.step(calls_message(hostile))
        [record] = info["calls"]
        assert record["status"] in ("tool_hallucination", "invalid_arguments"), record
        assert record["feedback"].startswith("an error occured when call "), record["feedback"][:200]
        assert not terminated
        _, _, terminated, _, info = env.step("The answer is 3.")
        assert terminated and "correct" in info
    finally:
        env.close()
