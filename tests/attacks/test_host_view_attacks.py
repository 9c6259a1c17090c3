"""Attacks on what the host shares with a worker besides the protocol: its files (the data with the gold
answers, the repository, the host's /dev/shm), its process table and memory (tasks, memfd), file locks and
watches, CPU between calls, and workers outliving a host that died."""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_attacks import SECRET_MARK, assert_denied, attack

from hopgym.sandbox import Sandbox, make_sandbox
from tests.extras import require_isolation

pytestmark = pytest.mark.attack

REPO = Path(__file__).resolve().parents[2]


def is_docker(sandbox: Sandbox) -> bool:
    return sandbox.isolation.startswith("docker")


@pytest.fixture(scope="module")
def host_files(host_dir: Path) -> Iterator[list[str]]:
    """World-readable host files: the data (gold answers), the repository, a file in the host's /dev/shm."""
    readable = host_dir / "readable.txt"
    readable.write_text(SECRET_MARK)
    readable.chmod(0o644)
    # A unique name: in a contained run's own PID namespace every host is PID 1.
    handle, name = tempfile.mkstemp(prefix="hopgym-attack-", dir="/dev/shm")
    os.close(handle)
    shared_memory = Path(name)
    shared_memory.write_text(SECRET_MARK)
    shared_memory.chmod(0o644)
    paths = [str(readable), str(shared_memory), str(REPO / "README.md"), str(REPO / "tests" / "attacks")]
    data = os.environ.get("HOPGYM_DATA")
    if data and Path(data).is_dir():
        paths += [data, *(str(path) for path in Path(data).glob("*/*.jsonl"))]
    yield paths
    shared_memory.unlink()


def test_host_files_the_worker_needs_not_are_absent(sandbox: Sandbox, host_files: list[str]) -> None:
    body = "import os\nreturn [path for path in paths if os.path.exists(path)]"
    result = attack(sandbox, body, paths=host_files)
    assert result.status == "ok", result
    assert result.value == []
    listing = attack(
        sandbox, "import os\nreturn sorted(os.listdir('/dev/shm')) if os.path.isdir('/dev/shm') else []"
    )
    assert not any(name.startswith("hopgym-attack-") for name in listing.value), listing


def test_threads_are_capped_by_the_task_limit(sandbox: Sandbox) -> None:
    if "runsc" in sandbox.isolation:
        pytest.skip("gVisor runs the worker's threads in its own kernel: they are not tasks of the host")
    body = """
import threading, time
threading.stack_size(65536)  # threads cost almost no address space: only a task limit stops them
started = 0
try:
    for _ in range(300):
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
return started
"""
    result = attack(sandbox, body)
    assert result.status == "ok", result
    assert result.value < 64, result.value


def test_memfd_memory_counts_against_the_memory_limit(sandbox: Sandbox) -> None:
    body = """
import os
chunk = b'x' * (1 << 20)
held = []
for megabytes in range(840):  # 840 MiB in 56 files, each below the file-size limit
    try:
        if megabytes % 15 == 0:
            held.append(os.memfd_create('hoard'))
        os.write(held[-1], chunk)  # written, never mapped: no address space is used
    except OSError as exc:
        return megabytes
return 840
"""
    result = attack(sandbox, body)
    # 256 MiB of memory: the write fails, or the worker is killed (by the memory limit, or by the wall-clock
    # limit where writes are slow, as under gVisor on a loaded machine); it never returns holding twice that.
    if result.status == "ok":
        assert result.value < 512, result
    else:
        assert result.status in ("resource_limit", "timeout"), result


def test_file_locks_are_denied(sandbox: Sandbox) -> None:
    for how in ("fcntl.flock(handle, fcntl.LOCK_EX)", "fcntl.lockf(handle, fcntl.LOCK_SH)"):
        assert_denied(
            attack(sandbox, f"import fcntl, os\nhandle = open(os.__file__)\n{how}\nreturn 'locked'")
        )


def test_watching_files_is_denied(sandbox: Sandbox) -> None:
    body = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.inotify_init1(0) < 0:
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
return 'watching'
"""
    assert_denied(attack(sandbox, body))


def test_background_threads_do_not_run_between_calls(sandbox: Sandbox) -> None:
    if is_docker(sandbox):
        pytest.skip("a container is bounded by its --cpus share between calls, not stopped")
    sandbox.load(
        [
            "import threading, time\n"
            "def spin():\n    while True:\n        pass\n"
            "def start():\n    threading.Thread(target=spin, daemon=True).start()\n"
            "def cpu():\n    return time.process_time()\n"
        ]
    )
    assert sandbox.call("start", {}).status == "ok"
    before = sandbox.call("cpu", {}).value
    time.sleep(1.5)
    after = sandbox.call("cpu", {}).value
    assert after - before < 0.2, f"the worker used {after - before:.2f} CPU seconds between two calls"


HOST = """
import json, os, sys, threading, time
from pathlib import Path
from hopgym.sandbox import make_sandbox

box = make_sandbox("process", isolation=sys.argv[1], timeout=3600)
box.load(["def spin():\\n    while True:\\n        pass\\n"])  # a busy worker never reads its closed input
threading.Thread(target=box.call, args=("spin", {})).start()
box.wait_until_warm()
time.sleep(0.5)

def descendants(pid):
    tasks = Path(f"/proc/{pid}/task").iterdir()
    children = [int(child) for task in tasks for child in (task / "children").read_text().split()]
    return children + [grandchild for child in children for grandchild in descendants(child)]

print(json.dumps(descendants(os.getpid())), flush=True)
time.sleep(3600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("level", ["bwrap", "namespaces"])
def test_workers_die_with_their_host(level: str) -> None:
    require_isolation(level)
    host = subprocess.Popen([sys.executable, "-c", HOST, level], stdout=subprocess.PIPE, text=True)
    workers = json.loads(host.stdout.readline())
    assert len(workers) >= 4  # at least two workers (the current one and a spare) and what runs them
    host.send_signal(signal.SIGKILL)
    host.wait()
    give_up = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < give_up:
        time.sleep(0.05)
    assert [pid for pid in workers if alive(pid)] == []
    make_sandbox("process", isolation=level).close()  # removes the groups the dead host left behind
    # os.walk, not Path.glob: other tests' containers come and go under /sys/fs/cgroup while it is read, and
    # glob raises on a directory that vanished between its listing and its scan (os.walk skips it).
    leftovers = [
        os.path.join(parent, name)
        for parent, names, _ in os.walk("/sys/fs/cgroup")
        for name in fnmatch.filter(names, f"hopgym-*-{host.pid}-*")
    ]
    assert leftovers == []
