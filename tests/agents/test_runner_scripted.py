"""The eval runner end to end on real ToolHop tasks and the real sandbox, with a scripted model server:
records, summaries, model failures, resume after a kill or an interrupt, the report command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from hopgym.agents.evaluation.records import lock_run_folder
from hopgym.agents.evaluation.stats import mean_interval
from hopgym.agents.model.local_server import LOCAL_CONCURRENCY
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.cli import main
from hopgym.commands.env_arguments import parse_key_values
from hopgym.commands.model_arguments import DEFAULT_CONCURRENCY, concurrency_of
from hopgym.envs.toolhop.metrics import table4_metrics
from hopgym.errors import ConfigError
from tests.scripted_runs import TASKS, question_of, read_records, run, solving_policy
from tests.shared_data import SUBSET


def test_a_run_writes_one_record_per_task_and_consistent_summaries(tmp_path: Path) -> None:
    with ScriptedModelServer(solving_policy()) as server:
        summary = run(server, tmp_path / "run")
    records = read_records(tmp_path / "run")
    assert sorted(r["task_id"] for r in records) == sorted(task.id for task in TASKS[:6])
    for record in records:
        assert {"task_id", "reward", "correct", "turns", "calls", "messages", "error"} <= set(record)
        assert record["error"] is None and record["turns"] == 2 and len(record["calls"]) == 1
        assert record["correct"] == (
            TASKS[record["index"]].id == record["task_id"] and record["index"] % 2 == 0
        )
        assert record["messages"][-1] == {"role": "assistant", "content": record["final_answer"]}
        assert record["agent"]["prompt_tokens"] == 20 and record["latency_ms"] > 0
    assert summary["answer_correctness"] == 0.5 and summary["mean_turns"] == 2.0
    assert summary["parallel_call_rate"] == 0.0 and summary["errors"] == 0
    assert {k: summary[k] for k in table4_metrics(records)} == table4_metrics(records)
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary
    half = summary["intervals"]["answer_correctness"]["half_width"]
    assert (
        half > 0
        and f"| Answer correctness | 50.00 ± {100 * half:.2f} |"
        in (tmp_path / "run" / "summary.md").read_text()
    )


def test_a_model_server_failure_marks_only_that_episode(tmp_path: Path) -> None:
    with ScriptedModelServer(solving_policy(correct_every=1, fail_index=2)) as server:
        summary = run(server, tmp_path / "run", limit=4)
        assert sum(question_of(r) == TASKS[2].question for r in server.requests) == 2  # one retry
    records = {r["index"]: r for r in read_records(tmp_path / "run")}
    assert "ModelError" in records[2]["error"] and "gave up after 2 attempts" in records[2]["error"]
    assert records[2]["correct"] is False
    assert all(records[i]["error"] is None and records[i]["correct"] for i in (0, 1, 3))
    assert summary["errors"] == 1 and summary["answer_correctness"] == 0.75


def test_an_existing_run_needs_resume_and_the_same_settings(tmp_path: Path) -> None:
    with ScriptedModelServer(solving_policy()) as server:
        run(server, tmp_path / "run", limit=1)
        with pytest.raises(ConfigError, match="--resume"):
            run(server, tmp_path / "run", limit=1)
        with pytest.raises(ConfigError, match="agent"):
            run(server, tmp_path / "run", limit=1, resume=True, agent="react")
        run(server, tmp_path / "run", limit=2, resume=True)
    assert [r["index"] for r in read_records(tmp_path / "run")] == [0, 1]


def test_retry_errors_runs_the_failed_episodes_again_and_keeps_the_others(tmp_path: Path) -> None:
    """A run where the model failed for one task: ``--resume`` keeps it failed; with ``--retry-errors``
    only that episode runs again and its record replaces the failed one (each episode once)."""
    out = tmp_path / "run"
    with ScriptedModelServer(solving_policy(correct_every=1, fail_index=2)) as server:
        run(server, out, limit=4)
        run(server, out, limit=4, resume=True)
        assert len(server.requests) == 3 * 2 + 2  # two turns each, the failed task's two attempts, once
        with pytest.raises(ConfigError, match=r"--retry-errors .* add --resume"):
            run(server, out, limit=4, retry_errors=True)
    failed_before = {r["index"]: r for r in read_records(out)}
    assert failed_before[2]["error"] is not None
    with ScriptedModelServer(solving_policy(correct_every=1)) as fixed:
        run(fixed, out, limit=2, resume=True, retry_errors=True)  # the failed episode is not in this run
        assert fixed.requests == [] and read_records(out) == list(failed_before.values())
        summary = run(fixed, out, limit=4, resume=True, retry_errors=True)
        assert {question_of(r) for r in fixed.requests} == {TASKS[2].question}
    records = read_records(out)
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3]
    assert all(r["error"] is None and r["correct"] for r in records)
    assert [r for r in records if r["index"] != 2] == [r for i, r in failed_before.items() if i != 2]
    assert summary["errors"] == 0 and summary["answer_correctness"] == 1.0


def test_a_second_run_on_a_folder_being_written_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(solving_policy()) as server:
        run(server, out, limit=1)
        first = lock_run_folder(out)  # what a run holds while it runs
        try:
            with pytest.raises(ConfigError, match="being written by another run"):
                run(server, out, limit=2, resume=True)
            with pytest.raises(ConfigError, match="being written by another run"):  # not "pass --resume"
                run(server, out, limit=2)
        finally:
            first.close()
        run(server, out, limit=2, resume=True)
    assert [r["index"] for r in read_records(out)] == [0, 1]


def test_task_ids_choose_the_tasks_in_their_order_and_bad_ones_are_named(tmp_path: Path) -> None:
    chosen = (TASKS[5].id, TASKS[2].id)
    with ScriptedModelServer(solving_policy()) as server:
        run(server, tmp_path / "run", limit=None, concurrency=1, task_ids=chosen)
        with pytest.raises(ConfigError, match=r"toolhop-nope: no such task.*ids look like toolhop-"):
            run(server, tmp_path / "unknown", limit=None, task_ids=(TASKS[0].id, "toolhop-nope"))
        with pytest.raises(ConfigError, match="--limit and --task"):
            run(server, tmp_path / "both", task_ids=chosen)
        with pytest.raises(ConfigError, match="given twice"):
            run(server, tmp_path / "twice", limit=None, task_ids=(TASKS[1].id, TASKS[1].id))
    records = read_records(tmp_path / "run")
    assert [(r["task_id"], r["index"]) for r in records] == [(TASKS[5].id, 5), (TASKS[2].id, 2)]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["task_ids"] == list(chosen)
    assert not (tmp_path / "unknown" / "episodes.jsonl").exists()  # refused before anything is written


def eval_command(server: ScriptedModelServer, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "hopgym.cli", "eval", "--model", server.model, "--api-base", server.api_base,
        "--api-key", "sk", "--limit", "8", "--concurrency", "2", "--out", str(out), "--no-progress", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGINT])
def test_resume_after_the_runner_is_stopped_loses_and_duplicates_nothing(tmp_path: Path, stop_signal) -> None:
    out = tmp_path / "run"
    episodes = out / "episodes.jsonl"
    with ScriptedModelServer(solving_policy(delay=0.4)) as server:
        first = subprocess.Popen(eval_command(server, out), start_new_session=True)
        deadline = time.monotonic() + 120
        while not (episodes.exists() and len(episodes.read_text().splitlines()) >= 2):
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not progress"
            time.sleep(0.1)
        os.killpg(first.pid, stop_signal)
        code = first.wait(timeout=60)
        assert code == (130 if stop_signal == signal.SIGINT else -signal.SIGKILL)
        before = episodes.read_text()
        assert 2 <= len(before.splitlines()) < 8
        with episodes.open("a") as handle:  # as if the kill had landed in the middle of a write
            handle.write('{"task_id": "toolhop-0')
        resumed = subprocess.run(
            eval_command(server, out, "--resume"), capture_output=True, text=True, timeout=300
        )
        exited = time.time()
    assert resumed.returncode == 0, resumed.stderr
    after = episodes.read_text()
    assert after.startswith(before)  # finished episodes are kept as they were
    ids = [r["task_id"] for r in read_records(out)]
    assert sorted(ids) == sorted(task.id for task in TASKS[:8]) and len(ids) == 8
    assert "Answer correctness" in resumed.stdout
    # The process ends promptly once its work is done, whatever litellm leaves pending.
    assert exited - (out / "summary.md").stat().st_mtime < 10


def test_report_prints_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedModelServer(solving_policy()) as server:
        run(server, tmp_path / "every-second", limit=4)
    with ScriptedModelServer(solving_policy(correct_every=1)) as server:
        run(server, tmp_path / "all", limit=4)
    assert main(["report", str(tmp_path / "every-second"), str(tmp_path / "all")]) == 0
    output = capsys.readouterr().out
    assert "| Metric | every-second | all |" in output
    half = 100 * mean_interval([1, 0, 1, 0])["half_width"]  # every second task right; the other run: all
    assert f"| Answer correctness | 50.00 ± {half:.2f} | 100.00 ± 0.00 |" in output


def test_key_value_options_parse_json_values() -> None:
    assert parse_key_values(["max_turns=3", "name=abc", "flag=true", "x="], "--env-arg") == {
        "max_turns": 3,
        "name": "abc",
        "flag": True,
        "x": "",
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_key_values(["novalue"], "--env-arg")


def cli_eval(server: ScriptedModelServer, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``hopgym eval`` in a real subprocess; the timeout turns a hang into a failure, not a stuck test."""
    command = eval_command(server, out, *extra)
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


REFUSING_AGENT = """
import sys
from hopgym.agents.policies.fc import FunctionCallingAgent
from hopgym.cli import main
from hopgym.errors import ConfigError

async def refuse(self, observation, info):
    raise ConfigError("this agent refuses to act (a test)")

FunctionCallingAgent.act = refuse
sys.exit(main(sys.argv[1:]))
"""
"""``hopgym`` whose fc agent fails every episode before any model call."""


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_a_run_whose_every_episode_fails_outside_the_model_ends_recorded_and_exits_1(
    tmp_path: Path, concurrency: str
) -> None:
    """The agent fails every episode before any model call; each failed episode's env is discarded. The
    run used to wait forever for an env once ``concurrency`` of them were gone."""
    out = tmp_path / "run"
    with ScriptedModelServer(solving_policy()) as server:
        command = eval_command(server, out, "--limit", "5", "--concurrency", concurrency)
        assert command[1:3] == ["-m", "hopgym.cli"]
        done = subprocess.run(
            [sys.executable, "-c", REFUSING_AGENT, *command[3:]], capture_output=True, text=True, timeout=300
        )
        assert server.requests == []
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert last_line(done.stderr).startswith("hopgym: error: no episode reached the model (5 of 5 episodes")
    assert "this agent refuses to act" in last_line(done.stderr)
    records = read_records(out)
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3, 4]
    assert all("ConfigError" in r["error"] for r in records)


def test_an_unreachable_model_server_exits_1_with_the_cause(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "hopgym.cli", "eval", "--model", "openai/none", "--api-base",
        "http://127.0.0.1:9/v1", "--api-key", "sk", "--limit", "2", "--max-retries", "0",
        "--out", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert last_line(done.stderr).startswith("hopgym: error: no episode reached the model (2 of 2")
    assert "ModelError" in last_line(done.stderr)


def test_a_run_with_some_failed_episodes_says_so_and_exits_0(tmp_path: Path) -> None:
    with ScriptedModelServer(solving_policy(fail_index=1)) as server:
        done = cli_eval(server, tmp_path / "run", "--limit", "3", "--max-retries", "0")
    assert done.returncode == 0, done.stderr
    line = last_line(done.stderr)
    assert line.startswith("hopgym: 1 of 3 episodes failed (see 'error' in episodes.jsonl)")
    assert "ModelError" in line


def test_any_exception_of_one_episode_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:
    """Fault injection: the agent raises a plain RuntimeError (no hopgym error) in one episode."""
    from hopgym.agents.policies.fc import FunctionCallingAgent

    act = FunctionCallingAgent.act

    async def failing_act(self, observation, info):
        if question_of({"messages": observation["messages"]}) == TASKS[1].question:
            raise RuntimeError("a bug in one episode")
        return await act(self, observation, info)

    monkeypatch.setattr(FunctionCallingAgent, "act", failing_act)
    with ScriptedModelServer(solving_policy(correct_every=1)) as server:
        summary = run(server, tmp_path / "run", limit=4, concurrency=1)
    records = {r["index"]: r for r in read_records(tmp_path / "run")}
    assert records[1]["error"] == "RuntimeError: a bug in one episode"
    assert all(records[i]["error"] is None and records[i]["correct"] for i in (0, 2, 3))
    assert summary["errors"] == 1


def ran(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_cli_mistakes_are_one_line_and_leave_no_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "corrupt.jsonl"
    rows = SUBSET.read_text().splitlines()[:2]
    corrupt.write_text("\n".join([*rows, '{"question": "broken']) + "\n")
    out = tmp_path / "run"
    base = ["eval", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", "--out", str(out)]
    cases = [
        (["--env-arg", "maxturns=3"], "env ToolHop-v0 has no option 'maxturns' (did you mean 'max_turns'?)"),
        (["--env", "ToolHop-v2"], "unknown env 'ToolHop-v2' (did you mean 'ToolHop-v0'?); valid: ToolHop-v0"),
        (
            ["--env-arg", 'sandbox_options={"timout": 3}'],
            "has no option 'timout' (did you mean 'timeout'?); valid: isolation",
        ),
        (["--env-arg", "sandbox_options=3"], "sandbox_options must be a dict of options, got int"),
        (["--data", str(corrupt)], f"{corrupt}:3: not a JSON row"),
        (["--feedback", "verbose"], "verbose"),
        (["--agent", "fcc"], "unknown agent 'fcc'"),
        (["--agent-arg", "retries=2"], "agent 'fc' has no option 'retries'; valid: tool_choice"),
        (["--agent", "codeact", "--agent-arg", "retries=2"], "has no option 'retries'; valid: none"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
    ]
    for extra, message in cases:
        code, err = ran([*base, *extra], capsys)
        assert code == 2, extra
        assert len(err.strip().splitlines()) == 1 and err.startswith("hopgym: error: "), err
        assert message in err, err
        assert not out.exists(), extra  # nothing written: the corrected command needs no --resume
    with pytest.raises(ConfigError, match="maxturns"):
        main([*base, "--env-arg", "maxturns=3", "--debug"])


def test_a_typo_then_the_corrected_command_runs_without_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(solving_policy()) as server:
        argv = ["eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk"]
        argv += ["--limit", "2", "--out", str(out), "--no-progress"]
        code, err = ran([*argv, "--feedback", "verbose"], capsys)
        assert code == 2 and "feedback" in err and not out.exists()
        code, err = ran([*argv, "--feedback", "minimal"], capsys)
    assert code == 0, err
    assert len(read_records(out)) == 2


def test_an_env_still_being_made_when_its_episode_is_cancelled_is_listed_for_closing() -> None:
    """A crashed or stopped run cancels its episodes while an env may still be made in a thread; that env
    must be in the pool's list, which the run closes once the env threads have ended."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from hopgym.serving.env_pool import EnvPool

    started, finish = threading.Event(), threading.Event()

    def slow_make_env() -> object:
        started.set()
        finish.wait(10)
        return "the env made after its episode was cancelled"

    async def scenario() -> EnvPool:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(2) as executor:
            pool = EnvPool(slow_make_env, 2, envs=["the first env"], background=executor)
            assert await pool.acquire() == "the first env"
            episode = asyncio.ensure_future(pool.acquire())  # the second place: a new env, made slowly
            await loop.run_in_executor(None, started.wait, 10)
            episode.cancel()
            await asyncio.gather(episode, return_exceptions=True)
            finish.set()
        return pool  # the executor has shut down: every env thread has ended

    pool = asyncio.run(scenario())
    assert pool.envs == ["the first env", "the env made after its episode was cancelled"]


def test_the_local_model_runs_one_conversation_at_a_time_unless_told_otherwise(tmp_path) -> None:
    """A checkpoint folder runs a batch's worth at once: its server generates waiting requests together."""
    from hopgym.agents.model.checkpoint_entry import MAX_BATCH

    folder = Namespace(model=str(tmp_path), concurrency=None, api_base=None)
    assert concurrency_of(folder) == MAX_BATCH > 1
    assert concurrency_of(Namespace(model=str(tmp_path), concurrency=None, api_base="http://x/v1")) == 8
    assert LOCAL_CONCURRENCY == 1
    assert concurrency_of(Namespace(model="local", concurrency=None), default=4) == 1
    assert concurrency_of(Namespace(model="local", concurrency=3)) == 3
    assert concurrency_of(Namespace(model="openai/x", concurrency=None)) == DEFAULT_CONCURRENCY
    assert concurrency_of(Namespace(model="openai/x", concurrency=None), default=4) == 4
