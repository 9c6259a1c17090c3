"""Provenance end to end (real ToolHop data, scripted model server): run.json records version, data
sha256, protocol and times; the report warns before comparing runs on other data or another protocol,
and marks a run that was interrupted."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

import pytest

from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply
from hopgym.cli import main
from tests.scripted_runs import eval_args, read_records, seed_policy
from tests.shared_data import SUBSET


def slow_policy(_request: dict) -> ScriptedReply:
    return ScriptedReply(content="Final answer: no idea", delay=0.5)


def test_run_json_records_where_the_numbers_come_from(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with ScriptedModelServer(seed_policy()) as server:
        assert main(eval_args(server, out, "--limit", "3")) == 0
    provenance = json.loads((out / "run.json").read_text())["provenance"]
    assert provenance["hopgym_version"] == version("hopgym")
    assert provenance["data"] == {str(SUBSET.resolve()): hashlib.sha256(SUBSET.read_bytes()).hexdigest()}
    assert provenance["protocol"] == "official"
    started, finished = (datetime.fromisoformat(provenance[key]) for key in ("started", "finished"))
    assert started <= finished and started.tzinfo is not None
    assert (provenance["episodes_expected"], provenance["episodes_recorded"], provenance["complete"]) == (
        3,
        3,
        True,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["provenance"] == provenance


def test_the_report_says_when_runs_differ_in_data_or_protocol(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fewer_rows = tmp_path / "toolhop-3.jsonl"  # another data file: the subset's first three rows
    fewer_rows.write_text("".join(SUBSET.read_text().splitlines(keepends=True)[:3]))
    runs = {"base": [], "other-data": ["--data", str(fewer_rows)], "hopgym": ["--env-arg", "protocol=hopgym"]}
    with ScriptedModelServer(seed_policy()) as server:
        for name, extra in runs.items():
            assert main(eval_args(server, tmp_path / name, "--limit", "2", *extra)) == 0
    capsys.readouterr()
    base, other, hopgym = (str(tmp_path / name) for name in runs)
    assert main(["report", base, hopgym, "--out", str(tmp_path / "r1")]) == 0
    printed = capsys.readouterr().out
    assert "warning: these runs used different protocol, so their numbers are not comparable" in printed
    assert "(base: official, hopgym: hopgym)" in printed and "different data" not in printed
    report = (tmp_path / "r1" / "report.md").read_text()
    assert "> **Warning:** these runs used different protocol" in report
    assert main(["report", base, other]) == 0
    printed = capsys.readouterr().out
    short = hashlib.sha256(fewer_rows.read_bytes()).hexdigest()[:12]
    assert "warning: these runs used different data (sha256), so their numbers are not comparable" in printed
    assert f"other-data: {short})" in printed and "different protocol" not in printed
    assert main(["report", base]) == 0
    assert "warning" not in capsys.readouterr().out  # one complete run: nothing to say


def test_an_interrupted_run_is_marked_incomplete(tmp_path: Path) -> None:
    out = tmp_path / "run"
    episodes = out / "episodes.jsonl"
    with ScriptedModelServer(slow_policy) as server:
        args = eval_args(server, out, "--limit", "8", "--concurrency", "1")
        process = subprocess.Popen([sys.executable, "-m", "hopgym.cli", *args], start_new_session=True)
        deadline = time.monotonic() + 120
        while not (episodes.exists() and episodes.read_text().count("\n") >= 1):
            assert process.poll() is None and time.monotonic() < deadline, "the run did not progress"
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 130
    recorded = len(read_records(out))
    provenance = json.loads((out / "run.json").read_text())["provenance"]
    assert provenance["finished"] is None and provenance["complete"] is False
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"({recorded} episodes, **incomplete**: it never finished" in report
    assert "8 episodes selected" in report
