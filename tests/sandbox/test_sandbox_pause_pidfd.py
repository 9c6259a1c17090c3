"""The pause between calls signals the worker through its pidfd, never by pid: once the worker is gone and its
pid taken by another process, pausing must not stop that process. Run in a PID namespace of its own
(``unshare --pid --fork --mount-proc``), where the test hands the dead worker's pid to a fresh process by
writing ``ns_last_pid``, as pid reuse would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

SCENARIO = r"""
import os, signal, subprocess, time
from hopgym.sandbox import make_sandbox

BENIGN = "def still_works(x):\n    return {'echo': x}\n"
with make_sandbox("process", start=START, spares=0) as sandbox:
    sandbox.load([BENIGN])
    assert sandbox.call("still_works", {"x": 1}).value == {"echo": 1}
    connection = sandbox._current().connection
    pid = connection.pause_pid
    os.kill(pid, signal.SIGKILL)  # the worker dies (as a killed worker does) and is reaped
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.01)
    for _ in range(50):  # its pid goes to an unrelated process
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(pid - 1))
        unrelated = subprocess.Popen(["sleep", "60"])
        if unrelated.pid == pid:
            break
        unrelated.kill()
        unrelated.wait()
    assert unrelated.pid == pid, (unrelated.pid, pid)
    paused = connection._signal(signal.SIGSTOP)  # what the pause does after a reply
    time.sleep(0.1)
    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    print("paused", paused, "state", state)
    assert not paused and state != "T", state
    unrelated.kill()
    unrelated.wait()
    sandbox.load([BENIGN])  # the sandbox goes on with a fresh worker
    assert sandbox.call("still_works", {"x": 2}).value == {"echo": 2}
print("ok")
"""


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_the_pause_never_signals_a_process_that_took_the_workers_pid(tmp_path: Path, start: str) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a PID namespace where the test sets ns_last_pid)")
    script = tmp_path / "scenario.py"
    script.write_text(f"START = {start!r}\n{SCENARIO}")
    completed = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.getenv("PYTHONPATH")]))},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0 and completed.stdout.strip().endswith("ok"), (
        completed.stdout[-3000:] + completed.stderr[-3000:]
    )
