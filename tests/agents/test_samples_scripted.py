"""Repeated samples end to end on real ToolHop tasks, the real sandbox and a scripted model server:
K episodes per task keyed for an exact resume, pass@k from the model's seeds, sampling options in the
request, finish reasons recorded, a stratified task sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopgym.agents.evaluation.stats import mean_interval
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.cli import main
from hopgym.tasks.sampling import stratified_sample, task_stratum
from tests.scripted_runs import TASKS, eval_args, read_records, seed_policy


def test_samples_run_each_task_k_times_and_pass_at_k_follows_the_seeds(tmp_path: Path) -> None:
    out = tmp_path / "run"
    options = [
        "--limit",
        "2",
        "--samples",
        "3",
        "--model-seed",
        "10",
        "--top-p",
        "0.9",
        "--temperature",
        "0.7",
    ]
    extra_body = ["--model-arg", 'extra_body={"top_k": 20}']
    with ScriptedModelServer(seed_policy(cut_off_task=1)) as server:
        assert main(eval_args(server, out, *options, *extra_body)) == 0
        requests = list(server.requests)
    records = read_records(out)
    keys = sorted((r["task_id"], r["sample"]) for r in records)
    assert keys == sorted((task.id, k) for task in TASKS[:2] for k in range(3))
    assert {r["seed"] for r in records} == {0, 1, 2}
    # sample k asked the model with seed 10 + k; top_p, temperature and the extra body reached it
    assert sorted(request["seed"] for request in requests) == [10, 10, 11, 11, 12, 12]
    assert all(r["top_p"] == 0.9 and r["temperature"] == 0.7 and r["top_k"] == 20 for r in requests)
    # seeds 10 and 12 answer right, 11 wrong: every task has 2 of 3 correct
    assert [r["correct"] for r in sorted(records, key=lambda r: r["sample"])] == [True] * 2 + [False] * 2 + [
        True
    ] * 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples_per_task"] == 3 and summary["tasks"] == 2
    assert summary["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": 1.0, "3": 1.0}
    assert summary["pass_hat_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(1 / 3), "3": 0.0}
    assert summary["intervals"]["answer_correctness"] == mean_interval([2 / 3, 2 / 3])
    # the reply of task 1 was cut off: its finish reason is recorded and counted
    for record in records:
        cut = record["index"] == 1
        assert record["agent"]["finish_reasons"] == ["length" if cut else "stop"]
        assert record["agent"]["cut_off_replies"] == int(cut)
    assert summary["cut_off_replies"] == 3
    markdown = (out / "summary.md").read_text()
    assert "| pass@2 | 100.00 |" in markdown and "| Replies cut off by max tokens | 3 |" in markdown
    assert json.loads((out / "run.json").read_text())["samples"] == 3


def test_resume_redoes_exactly_the_missing_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(seed_policy()) as server:
        assert main(eval_args(server, out, "--limit", "2", "--samples", "2", "--model-seed", "0")) == 0
        lines = (out / "episodes.jsonl").read_text().splitlines()
        kept = [line for line in lines if (json.loads(line)["index"], json.loads(line)["sample"]) != (0, 1)]
        (out / "episodes.jsonl").write_text("\n".join(kept) + "\n")
        before = len(server.requests)
        assert (
            main(eval_args(server, out, "--limit", "2", "--samples", "2", "--model-seed", "0", "--resume"))
            == 0
        )
        assert [r["seed"] for r in server.requests[before:]] == [1]  # only sample 1 of task 0, with its seed
        more = eval_args(server, out, "--limit", "2", "--samples", "3", "--model-seed", "0", "--resume")
        assert main(more) == 2
    assert "it was run with {'samples': 2}, not {'samples': 3}" in capsys.readouterr().err
    keys = [(r["index"], r["sample"]) for r in read_records(out)]
    assert sorted(keys) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_stratified_sample_runs_the_tasks_it_names(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(seed_policy()) as server:
        assert main(eval_args(server, out, "--sample", "6", "--seed", "4")) == 0
    expected = stratified_sample([task_stratum(task) for task in TASKS], 6, seed=4)
    assert sorted(r["index"] for r in read_records(out)) == expected
    assert {r["seed"] for r in read_records(out)} == {4}


def test_the_cost_comes_from_litellms_bundled_price_map(tmp_path: Path) -> None:
    """A model the price map knows (the scripted server answers for any name): tokens times its prices,
    read here straight from the JSON file litellm bundles; a model it does not know has no cost."""
    import litellm

    prices = json.loads(
        (Path(litellm.__file__).parent / "model_prices_and_context_window_backup.json").read_text()
    )
    out = tmp_path / "run"
    with ScriptedModelServer(seed_policy()) as server:
        args = eval_args(server, out, "--limit", "2")
        args[args.index(server.model)] = "openai/gpt-4o-mini"
        assert main(args) == 0
        assert main(eval_args(server, tmp_path / "unknown", "--limit", "1")) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (20, 10)  # 10 and 5 per reply
    price = prices["gpt-4o-mini"]
    expected = 20 * price["input_cost_per_token"] + 10 * price["output_cost_per_token"]
    assert summary["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert f"| Cost (USD, litellm price map) | {expected:.6f} |" in (out / "summary.md").read_text()
    assert json.loads((tmp_path / "unknown" / "summary.json").read_text())["cost_usd"] is None
