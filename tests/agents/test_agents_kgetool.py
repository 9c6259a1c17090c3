"""The KGETool agent end to end: the runner, the real FamilyTool-v0 env (kg="extract", familytool-b) and a
scripted model server on 127.0.0.1 that writes KG.search lines with made-up relations.

Row KGMTUbench_0 (speaker Bob): "I'd like to cancel alarms during my mom's preferred dining time.", gold
sub-KG [Bob, mother, Alice], [Alice, prefer_dinnertime, dinnertime_0002], gold call
cancel_alarm(label="dinnertime_0002"). The model writes "mom" (made up) for "mother".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelClient, ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.agents.policies.kgetool.agent import KGEToolAgent
from hopgym.agents.policies.registry import agent_factory
from hopgym.agents.report.paper_tables import paper_tables_for_run
from hopgym.cli import main
from hopgym.errors import ConfigError

QUERY = "<speak>Speaker: Bob</speak> I'd like to cancel alarms during my mom's preferred dining time."
SEARCH = 'KG.search(start="Bob", path=["<relationship>mom","<relationship>prefer_dinnertime"])'
MOTHER = "([['Bob', 'mother', 'Alice'], ['Alice', 'prefer_dinnertime', 'dinnertime_0002']])"
FATHER = "([['Bob', 'father', 'Jack'], ['Jack', 'prefer_dinnertime', 'dinnertime_0001']])"
GOLD_CALL = '<tool_call>\n{"name": "cancel_alarm", "arguments": {"label": "dinnertime_0002"}}\n</tool_call>'
# Hand-computed extraction per mode (see tests/agents/test_agents_kgetool_extraction.py for the walks).
EXPECTED = {
    "exact": "<bad_extract>",
    "greedy": f"{MOTHER}<bad_extract>{FATHER}<bad_extract>",
    "retrieval": MOTHER,
}
KG_METRICS = {  # kg_em, kg_f1, kg_no_hallucination, kg_coverage, kg_format_error
    "exact": (0.0, 0.0, 0.0, 0.0, 0.0),
    "greedy": (0.0, 2 / 3, 0.0, 1.0, 0.0),
    "retrieval": (1.0, 1.0, 1.0, 1.0, 0.0),
}


def mom_retriever(relation: str, relations: list[str], k: int) -> list[str]:
    """A fixed similarity table, injected as 'module:function'."""
    return {"mom": ["mother", "wife", "husband"]}[relation][:k]


def is_extraction(request: dict[str, Any]) -> bool:
    return "tools" not in request and request.get("stop") == ["</output>"]


def scripted(extraction_reply: str, tool_use_reply: str):
    def policy(request: dict[str, Any]) -> ScriptedReply:
        if is_extraction(request):
            return ScriptedReply(content=extraction_reply)
        return ScriptedReply(content=tool_use_reply)

    return policy


def run_row(tmp_path: Path, policy, env_kwargs: dict[str, Any] | None = None, **agent_options: Any):
    """(the episode record, every request the model server received, the summary) for the first
    FamilyTool-b row; extraction is configured on the env only."""
    with ScriptedModelServer(policy) as server:
        config = EvalConfig(
            out=tmp_path / "run",
            model=ModelConfig(server.model, api_base=server.api_base, api_key="sk-test", backoff_base=0.01),
            env_id="FamilyTool-v0",
            env_kwargs={"variant": "b", "kg": "extract", **(env_kwargs or {})},
            agent="kgetool",
            agent_options=agent_options,
            limit=1,
            concurrency=1,
            progress=False,
        )
        summary = EvalRun(config).run()
        requests = server.requests
    [record] = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert record["task_id"] == "KGMTUbench_0" and record["error"] is None, record["error"]
    return record, requests, summary


@pytest.mark.parametrize("mode", ["exact", "greedy", "retrieval"])
def test_each_extraction_mode_end_to_end(tmp_path: Path, mode: str) -> None:
    retriever = f"{__name__}:mom_retriever" if mode == "retrieval" else None
    env_kwargs = {"extraction": mode, **({"retriever": retriever} if retriever else {})}
    reply = f"<output>\n<thought>mom is the mother</thought>\n<api_call>\n{SEARCH}\n</api_call>\n"
    record, requests, summary = run_row(tmp_path, scripted(reply, GOLD_CALL), env_kwargs)

    extraction_request, tool_request = requests
    assert is_extraction(extraction_request) and extraction_request["messages"][1]["content"] == (
        f"<intent>\n{QUERY}\n</intent>\n"
    )
    system = extraction_request["messages"][0]["content"]
    assert "- <relationship>prefer_dinnertime" in system and "- <relationship>mother" in system
    assert "<relationship>mom\n" not in system
    user = [m for m in tool_request["messages"] if m["role"] == "user"]
    assert user == [
        {"role": "user", "content": f"{QUERY} The extra information for the query is {EXPECTED[mode]}."}
    ]
    assert {tool["function"]["name"] for tool in tool_request["tools"]} >= {"cancel_alarm", "set_alarm"}

    assert record["agent"]["kg_subkg"] == EXPECTED[mode] and record["agent"]["kg_response"] == reply
    assert record["turns"] == 2  # the extraction turn, then the tool-use turn
    assert record["agent"]["kg_calls"] == [{"start": "Bob", "path": ["mom", "prefer_dinnertime"]}]
    assert record["agent"]["raw_json_tool_calls"] == 1 and record["agent"]["model_turns"] == 2
    assert [(c["name"], c["arguments"]) for c in record["calls"]] == [
        ("cancel_alarm", {"label": "dinnertime_0002"})
    ]
    metrics = record["metrics"]
    assert (metrics["tool_em"], metrics["tool_acc"], metrics["value_acc"]) == (1.0, 1.0, 1.0)
    keys = ("kg_em", "kg_f1", "kg_no_hallucination", "kg_coverage", "kg_format_error")
    assert tuple(metrics[key] for key in keys) == pytest.approx(KG_METRICS[mode])
    assert summary["kg_em"] == pytest.approx(KG_METRICS[mode][0])
    tables = paper_tables_for_run(tmp_path / "run")
    assert tables is not None
    label = {"exact": "Exact", "greedy": "GS", "retrieval": "RR"}[mode]
    assert (
        f"| openai/scripted | {label} | {' | '.join(f'{100 * v:.2f}' for v in KG_METRICS[mode])} |" in tables
    )
    assert "| openai/scripted | 100.00 | 100.00 | 100.00 |" in tables


def test_extraction_and_tool_use_models_can_differ_and_think_text_counts(tmp_path: Path) -> None:
    reply = f"<think>The mother is meant.\n{SEARCH}\n</think>\n<output>\n<api_call>\n</api_call>\n"
    record, requests, _ = run_row(tmp_path, scripted(reply, GOLD_CALL), kg_model="openai/extractor")
    assert [request["model"] for request in requests] == ["extractor", "scripted"]
    assert record["agent"]["kg_subkg"] == EXPECTED["greedy"]
    assert record["metrics"]["kg_format_error"] == 0.0


def test_raw_tool_calls_with_parameters_are_lost_as_officially(tmp_path: Path) -> None:
    bad = GOLD_CALL.replace('"arguments"', '"parameters"')
    record, _, _ = run_row(tmp_path, scripted(SEARCH, bad))
    assert record["calls"] == [] and record["agent"]["raw_json_tool_calls"] == 0
    assert record["metrics"]["tool_acc"] == 0.0 and record["metrics"]["kg_coverage"] == 1.0


def test_no_search_call_is_a_format_error(tmp_path: Path) -> None:
    record, requests, _ = run_row(tmp_path, scripted("I cannot tell.", GOLD_CALL))
    assert requests[1]["messages"][1]["content"] == f"{QUERY} The extra information for the query is ."
    assert record["metrics"]["kg_format_error"] == 1.0 and record["metrics"]["kg_no_hallucination"] is None


def test_extraction_options_belong_to_the_env_only() -> None:
    client = ModelClient(ModelConfig("openai/scripted", api_base="http://127.0.0.1:9/v1"))
    with pytest.raises(ConfigError, match=re.escape("--env-arg extraction=... --env-arg top_k=...")):
        KGEToolAgent(client, extraction="retrieval", top_k=2)
    with pytest.raises(ConfigError, match=r"no option 'kg_modle' \(valid: kg_model, kg_api_base\)"):
        KGEToolAgent(client, kg_modle="openai/x")
    with pytest.raises(ConfigError, match="kg_api_base needs kg_model"):
        KGEToolAgent(client, kg_api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=re.escape("--env-arg extraction=...")):
        agent_factory("kgetool", client, {"extraction": "retrieval"})  # before any run starts


def test_the_agent_and_the_extract_mode_need_each_other_before_any_run(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"--agent kgetool writes a 'kg-extraction' first turn.* 'standard'"
    ):
        run_row(tmp_path, scripted(SEARCH, GOLD_CALL), {"kg": "none"})
    with ScriptedModelServer(scripted(SEARCH, GOLD_CALL)) as server:
        for env, kwargs, agent in (("ToolHop-v0", {}, "kgetool"), ("FamilyTool-v0", {"kg": "extract"}, "fc")):
            config = EvalConfig(
                out=tmp_path / env,
                model=ModelConfig(server.model, api_base=server.api_base, api_key="sk-test"),
                env_id=env,
                env_kwargs=kwargs,
                agent=agent,
                progress=False,
            )
            with pytest.raises(ConfigError, match=rf"--agent {agent} writes .* reads its first turn as"):
                EvalRun(config).run()
            assert not config.out.exists()
        assert server.requests == []


def test_hopgym_eval_prints_the_paper_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = scripted(f"<api_call>\n{SEARCH}\n</api_call>", GOLD_CALL)
    with ScriptedModelServer(policy) as server:
        argv = ["eval", "--env", "FamilyTool-v0", "--agent", "kgetool", "--model", server.model]
        argv += ["--api-base", server.api_base, "--api-key", "sk-test", "--out", str(tmp_path / "cli")]
        argv += ["--env-arg", "variant=b", "--env-arg", "kg=extract", "--env-arg", "extraction=greedy"]
        argv += ["--limit", "2", "--no-progress"]
        assert main(argv) == 0
    printed = capsys.readouterr().out
    header = "| LLM for KG | Path Extraction | EM | F1 | No-Hallucination | Coverage | Format Error |"
    assert "Table 3 layout" in printed and header in printed
    assert "| LLM for Tool Use | EM | Tool Acc. | Value Acc. |" in printed
    assert len(server.requests) == 4  # two rows, each one extraction and one tool-use request
