"""``hopgym report A B --paired [--json]`` end to end on two run folders made by ``hopgym eval`` (real ToolHop
tasks, the real sandbox, a scripted model server over real HTTP): the dropped tasks are counted by cause
and the numbers are the hand-computed ones. Then hostile run folders (issue 25's attacks) against it: each
is a one-line error or a named skipped record, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.cli import main
from tests.extras import require_extra
from tests.scripted_runs import TASKS, read_records, solving_policy

require_extra("scipy", "report")

from scipy import stats  # noqa: E402

from hopgym.agents.evaluation import paired_stats  # noqa: E402

HANG_TIMEOUT = 120  # seconds: a refusal takes a few; a hang never ends
ROW = "| Answer correctness | 4 | 50.00 | 100.00 | +50.00 |"


def evaluate(policy, out: Path, *tasks: str) -> None:
    with ScriptedModelServer(policy) as server:
        code = main([
            "eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--max-retries", "0", "--no-progress", "--out", str(out), *tasks,
        ])  # fmt: skip
    assert code == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A: tasks 0-5, right on the even ones (0, 2, 4). B: tasks 1-6, right on all, but task 3's model
    server answers 500 (its episode ends with an error). Paired: 1, 2, 4, 5 (A right on 2 and 4, B on all):
    A only 0, B only 2. Dropped: task 0 (only in A), task 6 (only in B), task 3 (errored in B)."""
    root = tmp_path_factory.mktemp("paired")
    evaluate(solving_policy(correct_every=2), root / "a", "--limit", "6")
    chosen = [argument for task in TASKS[1:7] for argument in ("--task", task.id)]
    evaluate(solving_policy(correct_every=1, fail_index=3), root / "b", *chosen)
    return root / "a", root / "b"


def hopgym(*args: str) -> subprocess.CompletedProcess[str]:
    """``hopgym ARGS`` in a subprocess that must end within :data:`HANG_TIMEOUT` (else the test fails)."""
    return subprocess.run(
        [sys.executable, "-m", "hopgym.cli", *args], capture_output=True, text=True, timeout=HANG_TIMEOUT
    )


def test_the_paired_table_counts_the_dropped_tasks_and_holds_mcnemars_p(
    runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = runs
    errored = [r["task_id"] for r in read_records(b) if r["error"] is not None]
    assert errored == [TASKS[3].id]  # the run made what the fixture says
    assert main(["report", str(a), str(b), "--paired", "--label", "base", "--label", "new"]) == 0
    out = capsys.readouterr().out
    assert "| Metric | base | new |" in out  # the side-by-side summaries come first
    assert "B − A, A = base, B = new" in out
    assert "Tasks paired: 4; dropped: 1 only in A, 1 only in B, 1 errored" in out
    assert "Episodes left out for their error: A 0, B 1." in out
    p = stats.binomtest(2, 2, 0.5).pvalue  # 2 discordant pairs, both B's: (1/2)^2 * 2 = 0.5
    row = next(line for line in out.splitlines() if line.startswith(ROW))
    assert row.endswith(f"| McNemar exact (A only 0, B only 2) | {p:.4g} |") and p == 0.5
    assert "(10,000 resamples, seed 36)" in out


def test_the_json_holds_the_same_numbers_and_only_json_is_on_stdout(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = runs
    done = hopgym("report", str(a), str(b), "--paired", "--json", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"report: {tmp_path / 'report.md'}" in done.stderr
    document = json.loads(done.stdout)
    paired = document["paired"]
    assert (paired["a"], paired["b"], paired["direction"]) == ("a", "b", "b - a")
    assert paired["tasks"] == {"paired": 4, "only_in_a": 1, "only_in_b": 1, "errored": 1}
    assert paired["errored_episodes"] == {"a": 0, "b": 1}
    correctness = paired["metrics"]["answer_correctness"]
    assert (correctness["n"], correctness["a"], correctness["b"], correctness["difference"]) == (
        4,
        0.5,
        1,
        0.5,
    )
    assert (correctness["a_only"], correctness["b_only"], correctness["p_value"]) == (0, 2, 0.5)
    assert 0 <= correctness["low"] <= 0.5 <= correctness["high"] <= 1
    # Discordant rates 0 and 1/2: z^2 (1/2 - 1/4) / (1/4) = 3.84 -> 4 tasks for the interval.
    assert paired["tasks_needed"]["interval_excludes_0"] == 4
    assert paired["tasks_needed"]["mcnemar_power_80"] == paired_stats.tasks_for_power(0.0, 0.5)
    assert set(document["runs"]) == {"a", "b"} and document["runs"]["a"]["episodes"] == 6
    assert document["warnings"] == []  # same data, same protocol, both complete (errored episodes count)
    # The table and report.md print the same interval.
    table = hopgym("report", str(a), str(b), "--paired").stdout
    interval = f"[{100 * correctness['low']:.2f}, {100 * correctness['high']:.2f}]"
    assert f"{ROW} {interval} |" in table
    report = (tmp_path / "report.md").read_text()
    assert "## Paired comparison" in report and f"{ROW} {interval} |" in report


def test_paired_takes_exactly_two_runs(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = runs
    assert main(["report", str(a), str(b), str(a.parent), "--paired"]) == 2
    assert "--paired compares exactly two run folders, A B; got 3" in capsys.readouterr().err


def test_runs_over_other_tasks_are_refused_naming_the_counts(
    runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = runs
    other = tmp_path / "other"
    evaluate(solving_policy(), other, "--task", TASKS[7].id)
    assert main(["report", str(a), str(other), "--paired"]) == 2
    err = capsys.readouterr().err
    assert "no task can be paired: 6 only in A, 1 only in B, 0 with every episode errored" in err


# -- hostile run folders ----------------------------------------------------------------------------------


@pytest.fixture
def hostile(runs: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    a, b = runs
    return Path(shutil.copytree(a, tmp_path / "a")), Path(shutil.copytree(b, tmp_path / "b"))


def test_a_link_to_dev_zero_or_a_fifo_as_episodes_is_refused_without_hanging(
    hostile: tuple[Path, Path],
) -> None:
    a, b = hostile
    episodes = b / "episodes.jsonl"
    episodes.unlink()
    episodes.symlink_to("/dev/zero")
    done = hopgym("report", str(a), str(b), "--paired", "--json")
    assert done.returncode == 2 and done.stdout == ""
    refused = f"{episodes} is a symbolic link; a run folder's episodes.jsonl must be a regular file (refused)"
    assert done.stderr == f"hopgym: error: {refused}\n"
    episodes.unlink()
    os.mkfifo(episodes)
    done = hopgym("report", str(a), str(b), "--paired")
    assert done.returncode == 2 and f"{episodes} is a FIFO" in done.stderr and "Traceback" not in done.stderr
    episodes.unlink()
    done = hopgym("report", str(a), str(b), "--paired")
    assert done.returncode == 2 and f"{b} is not a run folder: it has no episodes.jsonl" in done.stderr


def test_malformed_records_are_named_and_the_comparison_runs_on_the_rest(hostile: tuple[Path, Path]) -> None:
    """Records that cannot be compared are skipped and named (a metric of 1e308 ended the summary's sum in
    an OverflowError before); a metric name holding ``|`` does not split its table row."""
    a, b = hostile
    records = read_records(a)
    base = next(r for r in records if r["task_id"] == TASKS[5].id)  # a task both runs paired
    first = len(records) + 1  # the line of the first malformed record, in both files (6 records each)
    malformed = [
        {**base, "sample": 1, "metrics": {"f1": 1e308}},
        {**base, "sample": 2, "metrics": {"f1": -2}},
        {**base, "sample": "3"},
    ]
    for folder, value in ((a, 0.25), (b, 0.75)):
        lines = [json.dumps(record) for record in malformed]
        lines += [json.dumps({**base, "sample": 4, "metrics": {"x|y": value}}), "{not json"]
        with (folder / "episodes.jsonl").open("a") as episodes:
            episodes.write("\n".join(lines) + "\n")
    done = hopgym("report", str(a), str(b), "--paired")
    assert done.returncode == 0, done.stderr
    whys = ("metric 'f1' is 1e+308, not a fraction", "metric 'f1' is -2, not", "sample is")
    for folder in (a, b):
        for offset, why in enumerate(whys):
            assert f"{folder / 'episodes.jsonl'}:{first + offset}: its {why}" in done.stderr
        assert f"{folder / 'episodes.jsonl'}:{first + 4}: not a JSON record" in done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| x\\|y |"))
    assert row.replace("\\|", "").count("|") == 9  # eight cells
    assert "| 1 | 25.00 | 75.00 | +50.00 | – | sign-flip permutation | 1 |" in row  # one task: no spread
