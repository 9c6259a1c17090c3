"""``start="fork"``: workers forked from a warm template. Each test lets one episode leave something behind
(files, memory, threads, fds, signal state, SysV IPC) and checks the next episode cannot reach it, and that
the template stays out of the workers' reach."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopgym.errors import ConfigError, IsolationUnavailableError
from hopgym.sandbox import forkserver, make_sandbox, process
from hopgym.sandbox.cgroups import WORKER_GROUP
from hopgym.sandbox.process import ProcessSandbox
from tests.extras import require_isolation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="start='fork' needs root")

PROBE = """
import os, signal, threading

def probe():
    numeric = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    status = open("/proc/self/status").read()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    names = ("SIGUSR1", "SIGTERM", "SIGALRM")
    handlers = {name: str(signal.getsignal(getattr(signal, name))) for name in names}
    return {
        "pids": numeric,
        "tmp": sorted(os.listdir("/tmp")),
        "fds": sorted(os.listdir("/proc/self/fd")),
        "threads": threads,
        "handlers": handlers,
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "alarm": signal.alarm(0),
        "marker": getattr(__import__("builtins"), "MARKER", None),
        "uid": os.getuid(),
        "random": __import__("random").random(),
    }
"""

LITTER = """
import builtins, ctypes, os, signal, threading, time

def litter():
    open("/tmp/left-behind", "w").write("secret of episode one")
    builtins.MARKER = "secret of episode one"
    keep = [os.open("/dev/null", os.O_RDONLY) for _ in range(5)] + list(os.pipe())
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()  # spins
    signal.signal(signal.SIGUSR1, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2, signal.SIGHUP])
    signal.alarm(100)
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.shmget(0x4F4B, 4096, 0o1000 | 0o666)  # IPC_CREAT
    return {"fds": len(keep), "shm": shm}
"""

SHM_PROBE = """
import ctypes

def shm_lookup():
    return ctypes.CDLL(None, use_errno=True).shmget(0x4F4B, 0, 0)
"""


MUTATE = """
import datetime, json, math, string

def mutate():
    math.pi = 3
    string.ascii_letters = "changed by episode one"
    json.dumps = lambda *args, **kwargs: "changed by episode one"
    datetime.MARKER = "episode one"
"""

MODULES = """
import datetime, json, math, string, sys

def modules():
    return {
        "pi": math.pi,
        "letters": string.ascii_letters,
        "dumps": json.dumps([1]),
        "marker": getattr(datetime, "MARKER", None),
        "imported": [name for name in ("calendar", "csv", "random", "unicodedata") if name in sys.modules],
    }
"""


@pytest.fixture(scope="module", params=["bwrap", "namespaces"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[ProcessSandbox]:
    require_isolation(request.param)
    box = make_sandbox("process", isolation=request.param, start="fork", timeout=5.0)
    yield box
    box.close()


def bound_in_tmp(box: ProcessSandbox) -> list[str]:
    """What a fresh worker's /tmp lists: nothing of its own, only the first folder of each read-only bind
    the sandbox reports under /tmp (a checkout or venv kept in /tmp is bound there; none elsewhere)."""
    binds = [Path(path) for path in box.report["view"]["read_only"]]
    return sorted({path.relative_to("/tmp").parts[0] for path in binds if Path("/tmp") in path.parents})


def _probe(box: ProcessSandbox) -> dict:
    assert box.load([PROBE, SHM_PROBE]).errors == ()
    result = box.call("probe", {})
    assert result.status == "ok", result.error
    return result.value


def test_forked_worker_is_hardened_like_a_spawned_one(sandbox: ProcessSandbox) -> None:
    assert sandbox.report["start"] == "fork"
    info = sandbox.worker_info
    assert info["uid"] == 65534 and info["seccomp"] is True
    fresh = _probe(sandbox)
    assert fresh["uid"] == 65534
    assert fresh["pids"] == [1], "a worker sees only its own PID namespace: not the template, no sibling"
    assert fresh["tmp"] == bound_in_tmp(sandbox)


def test_nothing_of_one_episode_reaches_the_next(sandbox: ProcessSandbox) -> None:
    fresh = _probe(sandbox)
    assert sandbox.load([LITTER]).errors == ()
    littered = sandbox.call("litter", {})
    assert littered.status == "ok", littered.error
    assert littered.value["shm"] >= 0, "the first episode could create a SysV segment"

    after = _probe(sandbox)
    assert after["tmp"] == bound_in_tmp(sandbox)  # the file the last episode wrote is gone
    assert after["marker"] is None
    assert after["fds"] == fresh["fds"]
    assert after["threads"] == 1
    assert after["handlers"] == fresh["handlers"]
    assert after["blocked"] == fresh["blocked"] == []
    assert after["alarm"] == 0
    assert after["pids"] == [1]
    assert after["random"] != fresh["random"], "each episode seeds its own random generator"
    shm = sandbox.call("shm_lookup", {})
    assert shm.status == "ok" and shm.value == -1, "the previous episode's SysV segment is not visible"


def test_modules_the_template_imported_are_each_episode_s_own(sandbox: ProcessSandbox) -> None:
    """The template imports common standard-library modules once; an episode that changes one changes only
    its own copy. No module with random state is among them (each episode seeds its own, see above)."""
    assert sandbox.load([MUTATE]).errors == ()
    assert sandbox.call("mutate", {}).status == "ok"
    assert sandbox.load([MODULES]).errors == ()
    after = sandbox.call("modules", {})
    assert after.status == "ok", after.error
    assert after.value == {
        "pi": 3.141592653589793,
        "letters": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "dumps": "[1]",
        "marker": None,
        "imported": ["calendar", "csv", "unicodedata"],
    }


def test_each_worker_has_its_own_cgroup_and_is_gone_after_the_episode(sandbox: ProcessSandbox) -> None:
    _probe(sandbox)
    host_pid = sandbox._current().connection.pause_pid
    groups = [line.split(":", 2)[2] for line in Path(f"/proc/{host_pid}/cgroup").read_text().splitlines()]
    names = [WORKER_GROUP.fullmatch(group.rsplit("/", 1)[-1]) for group in groups]
    mine = [name[0] for name in names if name is not None and name[2] == str(os.getpid())]
    assert mine, f"the forked worker is not in a worker cgroup: {groups}"
    _probe(sandbox)  # a new episode: the previous worker is killed (SIGKILL sent, its exit is the kernel's)
    assert _wait_gone(host_pid, patience=10.0), "the previous episode's worker still runs"


def _pid_of(pidfd: int) -> int:
    """The pid a pidfd refers to, as the kernel shows it (-1 once the process is gone)."""
    fdinfo = Path(f"/proc/self/fdinfo/{pidfd}").read_text()
    return int(next(line.split()[1] for line in fdinfo.splitlines() if line.startswith("Pid:")))


def test_a_killed_worker_exits_at_idle_priority_and_the_host_keeps_its_own(
    sandbox: ProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SIGKILL of the previous episode's worker goes out once it is at idle priority (so its exit
    does not preempt the host's reset); nothing else changes priority."""
    host_policy = os.sched_getscheduler(0)
    _probe(sandbox)
    previous = sandbox._current().connection.pause_pid
    send = signal.pidfd_send_signal
    seen = []

    def record(pidfd: int, number: int, *args: object) -> None:
        if _pid_of(pidfd) == previous:  # the pause between calls signals the current worker too
            seen.append((number, os.sched_getscheduler(previous)))
        send(pidfd, number, *args)

    by_pid: list[tuple] = []  # the template sets it: the host never acts on a bare pid
    monkeypatch.setattr(os, "sched_setscheduler", lambda *args: by_pid.append(args))
    monkeypatch.setattr(os, "setpriority", lambda *args: by_pid.append(args))
    monkeypatch.setattr(signal, "pidfd_send_signal", record)
    _probe(sandbox)
    assert seen == [(signal.SIGKILL, os.SCHED_IDLE)]
    assert by_pid == []
    current = sandbox._current().connection.pause_pid
    assert os.sched_getscheduler(current) == os.sched_getscheduler(0) == host_policy
    assert _wait_gone(previous, patience=10.0)


def test_a_killed_worker_still_exiting_later_goes_back_to_its_priority(
    sandbox: ProcessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker not gone once the next episode is under way finishes at its former priority, so that a
    busy host cannot hold back its exit (here its SIGKILL is lost; the reaper's cgroup kill ends it
    about 2 s later, long after the reaper restored the priority)."""
    _probe(sandbox)
    lingering = sandbox._current().connection.pause_pid
    former = os.sched_getscheduler(lingering)
    pidfd = os.pidfd_open(lingering)
    send = signal.pidfd_send_signal
    seen = []

    def lose_the_kill(pidfd: int, number: int, *args: object) -> None:
        if number != signal.SIGKILL:  # the pause between calls signals through the pidfd too
            return send(pidfd, number, *args)
        seen.append(os.sched_getscheduler(lingering))

    monkeypatch.setattr(signal, "pidfd_send_signal", lose_the_kill)
    try:
        _probe(sandbox)
        assert seen == [os.SCHED_IDLE]
        give_up = time.monotonic() + 10.0
        try:
            while os.sched_getscheduler(lingering) == os.SCHED_IDLE and time.monotonic() < give_up:
                time.sleep(0.005)
            policy = os.sched_getscheduler(lingering)
        except ProcessLookupError:
            pytest.fail("the worker was still at idle priority when the reaper's cgroup kill ended it")
        assert policy == former
    finally:
        monkeypatch.undo()
        with contextlib.suppress(ProcessLookupError):
            send(pidfd, signal.SIGKILL)
        os.close(pidfd)
    assert _wait_gone(lingering, patience=10.0)


def test_only_an_unreaped_worker_has_its_scheduling_changed(sandbox: ProcessSandbox) -> None:
    """The host changes a worker's scheduling through its template, the worker's parent: the live worker's
    is changed (and can be restored), while a request for one the template has reaped (whose pid could be
    another process's by now) or one of an earlier template changes nothing, and the sandbox serves on."""
    _probe(sandbox)
    server = sandbox._launcher._server
    current = sandbox._current().kill.__self__._forked
    former = os.sched_getscheduler(current.pid), os.sched_getparam(current.pid).sched_priority
    assert server.schedule(current, os.SCHED_BATCH, 0) == former
    assert os.sched_getscheduler(current.pid) == os.SCHED_BATCH
    assert server.schedule(current, *former) == (os.SCHED_BATCH, 0)
    assert os.sched_getscheduler(current.pid) == former[0]
    assert server.schedule(current._replace(generation=current.generation - 1), os.SCHED_IDLE, 0) is None
    assert os.sched_getscheduler(current.pid) == former[0]
    _probe(sandbox)  # a new episode: the previous worker is killed, and reaped by the template
    give_up = time.monotonic() + 10.0
    while Path(f"/proc/{current.pid}").exists() and time.monotonic() < give_up:  # until reaped, not a zombie
        time.sleep(0.01)
    assert not Path(f"/proc/{current.pid}").exists()
    assert server.schedule(current, os.SCHED_IDLE, 0) is None
    assert _probe(sandbox)["pids"] == [1]


def test_a_worker_that_dies_leaves_the_template_serving(sandbox: ProcessSandbox) -> None:
    assert sandbox.load(["import os\ndef die():\n    os._exit(3)\n"]).errors == ()
    result = sandbox.call("die", {})
    assert result.status == "error" and "exit code 3" in (result.error or "")
    assert _probe(sandbox)["pids"] == [1]


def test_a_killed_template_is_started_again() -> None:
    """Its live workers die with it (the current one fails once and is replaced); the next start forks
    from a new template."""
    require_isolation("bwrap")
    box = make_sandbox("process", isolation="bwrap", start="fork", spares=0)
    try:
        worker = box._current().connection.pause_pid
        os.kill(box._launcher._server._host_pid, signal.SIGKILL)
        _wait_gone(worker)  # the kill reaches the worker through its PID 1: a load sent sooner could win
        failed = box.load([PROBE])
        assert failed.functions == () and "the worker" in failed.errors[0]
        assert _probe(box)["uid"] == 65534
    finally:
        box.close()


def _wait_gone(pid: int, patience: float = 5.0) -> bool:
    """Whether ``pid`` exits (or is a zombie) within ``patience`` seconds."""
    give_up = time.monotonic() + patience
    while time.monotonic() < give_up:
        try:
            if "zombie" in Path(f"/proc/{pid}/status").read_text():
                return True
        except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
            return True
        time.sleep(0.01)
    return False


def test_a_child_the_kernels_list_skipped_once_is_found_on_the_next_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The list of the template's children can skip the newest one while an earlier worker exits during
    the read (seen as 'the fork-server's child N is gone' under load, once in a few thousand starts)."""
    read = forkserver.kernelfiles.read
    skipped = []

    def skip_the_newest_child_once(path: str) -> str:
        text = read(path)
        if path.endswith("/children") and not skipped:
            skipped.append(path)
            return " ".join(text.split()[:-1])
        return text

    require_isolation("bwrap")
    with make_sandbox("process", isolation="bwrap", start="fork", spares=0) as box:
        box.load(["def ping():\n    return 'pong'\n"])  # the template runs: the next start only forks
        monkeypatch.setattr(forkserver.kernelfiles, "read", skip_the_newest_child_once)
        box.load(["def ping():\n    return 'pong again'\n"])
        assert box.call("ping", {}).value == "pong again"
    assert skipped


def test_start_mode_is_checked() -> None:
    with pytest.raises(ConfigError, match="start='clone'"):
        make_sandbox("process", start="clone")
    with pytest.raises(IsolationUnavailableError, match="start='fork'"):
        make_sandbox("process", isolation="none", start="fork")


def test_fork_is_the_default_and_a_fallback_to_spawn_is_said(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "_FALLBACKS_LOGGED", set())  # said once per process: forget earlier tests
    with make_sandbox("process", spares=0) as box:
        assert box.report["start"] == "fork" and "start_fallback" not in box.report
    with caplog.at_level(logging.WARNING), make_sandbox("process", isolation="none", spares=0) as box:
        assert box.report["start"] == "spawn"
        assert "isolation 'bwrap' or 'namespaces'" in box.report["start_fallback"]
        assert box.load(["def f():\n    return 1\n"]).functions == ("f",)
        assert box.call("f", {}).value == 1
    logged = [record.getMessage() for record in caplog.records if record.name == "hopgym.sandbox.process"]
    reason = box.report["start_fallback"]
    assert logged == [f"sandbox workers start as new interpreters (start='spawn'): {reason}"]
