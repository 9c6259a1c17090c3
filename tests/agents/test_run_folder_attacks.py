"""Run folders are untrusted input (issue 25): each finding attacked the way it was found. Links planted in a
run folder pointing outside it, FIFOs and ``/dev/zero`` where files belong, malformed records, and the
viewer's token, idle connections and a file swapped for a link while it is served. Commands that hung
before run in a subprocess with a generous timeout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hopgym import run_folder
from hopgym.agents.construction.pipeline import construct_dataset, rows_path
from hopgym.agents.evaluation.records import EpisodeRecord, EpisodeWriter, read_episode_file, read_episodes
from hopgym.agents.model.scripted_server import ScriptedModelServer
from hopgym.agents.report.viewer import open_viewer
from hopgym.cli import main
from hopgym.errors import DataError
from tests.scripted_runs import TASKS, read_records, solving_policy
from tests.servers import get, get_json

SECRET = "SECRET-OUTSIDE-THE-RUN-FOLDER"
HANG_TIMEOUT = 120  # seconds: a refusal takes a few; a hang never ends


def eval_args(server: ScriptedModelServer, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
            "--limit", "2", "--max-retries", "0", "--no-progress", "--out", str(out), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 2 tasks, the second failed (its model server answered 500)."""
    out = tmp_path_factory.mktemp("made") / "run"
    with ScriptedModelServer(solving_policy(fail_index=1)) as server:
        assert main(eval_args(server, out)) == 0
    return out


@pytest.fixture
def run_copy(made_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(made_run, tmp_path / "run"))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the run folder that a planted link points to (a shell start-up file, say)."""
    target = tmp_path / "outside" / "startup.sh"
    target.parent.mkdir()
    target.write_text(f"echo {SECRET}\n")
    target.chmod(0o600)
    return target


def hopgym(*args: str) -> subprocess.CompletedProcess[str]:
    """``hopgym ARGS`` in a subprocess that must end within :data:`HANG_TIMEOUT` (else the test fails)."""
    return subprocess.run(
        [sys.executable, "-m", "hopgym.cli", *args], capture_output=True, text=True, timeout=HANG_TIMEOUT
    )


# -- eval --resume never writes through a planted link ----------------------------------------------------


def test_retry_errors_never_writes_through_planted_links(run_copy: Path, outside: Path) -> None:
    """The finding: ``episodes.jsonl.retry`` planted as a link to a shell start-up file received the
    folder's records. Now the rewrite goes to a file made anew, and the target is untouched."""
    before = outside.read_bytes()
    for name in ("episodes.jsonl.retry", "episodes.jsonl.tmp"):
        (run_copy / name).symlink_to(outside)
    with ScriptedModelServer(solving_policy()) as fixed:
        assert main(eval_args(fixed, run_copy, "--resume", "--retry-errors")) == 0
    assert outside.read_bytes() == before
    assert not (run_copy / "episodes.jsonl").is_symlink()
    records = read_records(run_copy)
    assert sorted(r["task_id"] for r in records) == sorted(t.id for t in TASKS[:2])
    assert all(r["error"] is None for r in records)


@pytest.mark.parametrize("name", ["summary.json", "summary.md", "run.json", "run.lock", "episodes.jsonl"])
def test_resume_refuses_a_planted_link(
    run_copy: Path, outside: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if (run_copy / name).exists():
        shutil.copy(run_copy / name, outside)  # a link to a valid copy: only the link itself is wrong
    before = outside.read_bytes()
    (run_copy / name).unlink(missing_ok=True)
    (run_copy / name).symlink_to(outside)
    with ScriptedModelServer(solving_policy()) as server:
        assert main(eval_args(server, run_copy, "--resume")) == 2
    assert f"{run_copy / name} is a symbolic link" in capsys.readouterr().err
    assert outside.read_bytes() == before and (run_copy / name).is_symlink()


@pytest.mark.parametrize("name", ["run.lock", "episodes.jsonl"])
def test_resume_refuses_a_fifo_instead_of_hanging(run_copy: Path, name: str) -> None:
    (run_copy / name).unlink(missing_ok=True)
    os.mkfifo(run_copy / name)
    with ScriptedModelServer(solving_policy()) as server:
        done = hopgym(*eval_args(server, run_copy, "--resume"))
    assert done.returncode == 2, done.stderr
    assert f"{run_copy / name} is a FIFO" in done.stderr


# -- readers: /dev/zero and FIFOs -------------------------------------------------------------------------


def reader_commands(folder: Path, tmp_path: Path) -> list[list[str]]:
    return [["report", str(folder)], ["rescore", str(folder), "--out", str(tmp_path / "rescored")],
            ["view", str(folder)]]  # fmt: skip


def test_dev_zero_as_episodes_is_refused_quickly(run_copy: Path, tmp_path: Path) -> None:
    """The finding: ``report``, ``rescore`` and ``view`` read ``/dev/zero`` until the OOM killer."""
    (run_copy / "episodes.jsonl").unlink()
    (run_copy / "episodes.jsonl").symlink_to("/dev/zero")
    for command in reader_commands(run_copy, tmp_path):
        done = hopgym(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert f"{run_copy / 'episodes.jsonl'} is a symbolic link" in done.stderr, command


def test_a_fifo_as_episodes_is_refused_without_hanging(run_copy: Path, tmp_path: Path) -> None:
    (run_copy / "episodes.jsonl").unlink()
    os.mkfifo(run_copy / "episodes.jsonl")
    for command in reader_commands(run_copy, tmp_path):
        done = hopgym(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert f"{run_copy / 'episodes.jsonl'} is a FIFO" in done.stderr, command


def test_a_device_is_refused_as_what_it_is() -> None:
    """A device reached without a link (the folder is given as /dev): named as a character device."""
    with pytest.raises(DataError, match=r"/dev/zero is a character device"):
        run_folder.read_records(Path("/dev/zero"))


# -- malformed records ------------------------------------------------------------------------------------

MALFORMED = [
    b'{"task_id": "nan", "sample": 0, "reward": NaN}',
    b'{"task_id": "string-sample", "sample": "one"}',
    b'{"task_id": "calls", "calls": 5}',
    b'{"task_id": "agent", "agent": {"prompt_tokens": "many"}}',
    b'["not", "an", "object"]',
    b'{"task_id": "bad-utf8", "final_answer": "\xff\xfe"}',
    b"[" * 100_000 + b"]" * 100_000,
]


def plant_malformed(folder: Path) -> int:
    """Append a record whose answer holds a lone surrogate (readable: kept), then the malformed lines;
    returns the line number of the first malformed one."""
    record = read_records(folder)[0]
    first = len(read_records(folder)) + 2
    surrogate = json.dumps({**record, "task_id": "surrogate", "final_answer": "\ud800 \udfff"})
    with (folder / "episodes.jsonl").open("ab") as episodes:
        episodes.write(surrogate.encode() + b"\n" + b"\n".join(MALFORMED) + b"\n")
    return first


def test_malformed_records_are_named_and_skipped_and_other_runs_still_served(
    run_copy: Path, made_run: Path
) -> None:
    first = plant_malformed(run_copy)
    read = read_episode_file(run_copy / "episodes.jsonl")
    episodes = run_copy / "episodes.jsonl"
    assert [line.split(": ")[0] for line in read.skipped] == [
        f"{episodes}:{first + i}" for i in range(len(MALFORMED))
    ]
    with open_viewer([run_copy, made_run]) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            damaged, other = get_json(server.url, "/api/runs")
            assert other["episodes"] == 2 and other["skipped"] == []
            assert damaged["skipped"] == read.skipped
            assert "surrogate" in {o["task_id"] for o in damaged["outlines"]}
            record = get_json(server.url, "/api/episode?run=0&task=surrogate&sample=0")
            assert record["final_answer"] == "\ufffd \ufffd"  # read as valid Unicode, like model text
        finally:
            server.shutdown()


def test_report_warns_of_each_malformed_record(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = plant_malformed(run_copy)
    assert main(["report", str(run_copy)]) == 0
    err = capsys.readouterr().err
    assert f"episodes.jsonl:{first}: not a JSON record" in err
    assert f"episodes.jsonl:{first + 1}: its sample is a JSON str" in err


def test_resume_refuses_a_damaged_file_and_leaves_it_as_it_is(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = plant_malformed(run_copy)
    before = (run_copy / "episodes.jsonl").read_bytes()
    with ScriptedModelServer(solving_policy()) as server:
        assert main(eval_args(server, run_copy, "--resume", "--retry-errors")) == 2
    assert f"episodes.jsonl:{first} is not a JSON record" in capsys.readouterr().err
    assert (run_copy / "episodes.jsonl").read_bytes() == before


def test_construct_resume_refuses_a_malformed_row_record(tmp_path: Path) -> None:
    """Found in review: ``construct --resume`` built each row of its rows file unchecked, so one JSON object
    of another shape ended it with a bare KeyError. Now the file is refused, naming the line."""
    out = tmp_path / "dataset.json"
    out.with_suffix(".run.json").write_text("{}")
    rows_path(out).write_text('{"id": "r", "tools": [], "usage": {}}\n{"id": "x"}\n')
    with pytest.raises(DataError, match=r"dataset\.rows\.jsonl:2 is not a row record \(KeyError"):
        construct_dataset([], None, out, {}, progress=False, resume=True)  # type: ignore[arg-type]


def test_what_the_writer_writes_the_reader_reads_back(tmp_path: Path) -> None:
    """A lone surrogate or a NaN in a record (model output, a metric) neither ends the run nor damages the
    file: the surrogate is written as its escape and read back as U+FFFD, the NaN as null."""
    writer = EpisodeWriter(tmp_path / "episodes.jsonl")
    writer.write(EpisodeRecord(task_id="t", final_answer="\ud800", metrics={"f1": float("nan")}))
    writer.close()
    assert read_episodes(tmp_path / "episodes.jsonl") == [
        EpisodeRecord(task_id="t", final_answer="\ufffd", metrics={"f1": None})
    ]


def test_report_of_a_record_holding_a_lone_surrogate_prints_and_writes(tmp_path: Path) -> None:
    """Found in review: a record holding a lone surrogate (a tool's result, as hopgym itself writes it:
    a ``\\udXXX`` escape) made ``hopgym report`` fail to print its table and to write ``--out``."""
    run = tmp_path / "run"
    run.mkdir()
    record = {"task_id": "t\ud800", "index": 0, "correct": False, "turns": 1, "error": "Bad\udfffError: x"}
    (run / "episodes.jsonl").write_text(json.dumps(record) + "\n")
    (run / "run.json").write_text(json.dumps({"env": "ToolHop-v0", "agent": "fc", "model": "m\udbff"}))
    done = hopgym("report", str(run), "--out", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    assert "m\ufffd" in done.stdout
    assert "m\ufffd" in (tmp_path / "report" / "report.md").read_text()


def test_reads_are_bounded_per_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_folder, "MAX_LINE_BYTES", 1000)
    lines = [b'{"task_id": "a"}', b'{"task_id": "' + b"x" * 5000 + b'"}', b'{"task_id": "b"}']
    (tmp_path / "episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    read = read_episode_file(tmp_path / "episodes.jsonl")
    assert [r.task_id for r in read.records] == ["a", "b"]
    assert read.skipped == [f"{tmp_path / 'episodes.jsonl'}:2: longer than 1000 bytes"]


# -- the viewer -------------------------------------------------------------------------------------------


@pytest.fixture
def served(made_run: Path) -> Iterator[Any]:
    with open_viewer([made_run], connection_timeout=1.0, max_connections=4) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield server
        finally:
            server.shutdown()


def test_the_viewer_serves_nothing_without_its_token(served: Any) -> None:
    """The finding: any local user sending the right Host header read every run, gold answers included."""
    for path in ("/", "/api/runs", "/api/episode?run=0&task=x", "/runs/0/run.json"):
        assert get(served.url, path, token=None)[0] == 403, path
        assert get(served.url, path, token="guessed")[0] == 403, path
        assert get(served.url, path)[0] in (200, 404), path
    assert get(served.url, "/runs/0/run.json")[0] == 200
    assert get(served.url, "/viewer.js", token=None)[0] == 200  # the page's code holds no run data


def open_socket(server: Any) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def closed_by_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_idle_and_trickling_connections_are_closed_and_the_server_still_serves(served: Any) -> None:
    """The finding: each idle connection pinned a thread forever."""
    threads = threading.active_count()
    idle = [open_socket(served) for _ in range(12)]  # more than the 4 served at once
    trickling = idle[0]
    started = time.monotonic()
    for _ in range(10):  # a byte now and then never completes a request
        try:
            trickling.sendall(b"G")
        except OSError:  # closed by the server already
            break
        time.sleep(0.3)
        assert threading.active_count() <= threads + 4
    assert all(closed_by_server(connection) for connection in idle)
    assert time.monotonic() - started < 30
    for connection in idle:
        connection.close()
    assert get(served.url, "/api/runs")[0] == 200


def test_a_file_swapped_for_a_link_is_never_served(made_run: Path, tmp_path: Path) -> None:
    """The finding: a link swapped in between the check and the read served a 0600 file outside."""
    folder = Path(shutil.copytree(made_run, tmp_path / "run"))
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    (folder / "notes.txt").write_text("public")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for make in (lambda p: p.symlink_to(secret), lambda p: p.write_text("public")):
                (folder / "notes.new").unlink(missing_ok=True)
                make(folder / "notes.new")
                os.replace(folder / "notes.new", folder / "notes.txt")

    with open_viewer([folder]) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        try:
            statuses = []
            for _ in range(300):
                status, body, _ = get(server.url, "/runs/0/notes.txt")
                assert SECRET.encode() not in body
                statuses.append(status)
        finally:
            stop.set()
            swapper.join()
            server.shutdown()
    assert set(statuses) <= {200, 404} and 200 in statuses
