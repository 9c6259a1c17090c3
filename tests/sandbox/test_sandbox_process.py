"""The process backend on the real machine: isolation levels, episodes, calls, code execution, limits."""

from __future__ import annotations

import importlib.util
import marshal
import os
import py_compile
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopgym.errors import ConfigError, IsolationUnavailableError, SandboxError, WorkerTimeoutError
from hopgym.sandbox import Sandbox, isolation, make_sandbox
from hopgym.sandbox.cgroups import WorkerCgroup, resolve_cgroups
from hopgym.sandbox.isolation import WORKER_FILES, WORKER_SCRIPT, worker_program, worker_view
from hopgym.sandbox.launcher import PausingConnection
from hopgym.sandbox.process import ProcessSandbox
from hopgym.sandbox.protocol import WorkerConnection
from hopgym.tasks.tool_source import compile_tool_code
from tests.extras import require_isolation
from tests.paths import ROOT

ISOLATED_LEVELS = ["bwrap", "namespaces"]


@pytest.fixture(scope="module", params=ISOLATED_LEVELS)
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    require_isolation(request.param)
    box = make_sandbox("process", isolation=request.param, timeout=2.0, result_cap=1000, output_cap=200)
    yield box
    box.close()


TOOLS = '''
import math
COUNTER = []

def add(a, b=1):
    """Adds."""
    print("adding", a, b)
    COUNTER.append(1)
    return a + b

def odd_values():
    return {"set": {1}, "tuple": (1, 2), "nan": math.nan}

def fails(reason):
    raise ValueError(reason)

def big(n):
    return "x" * n

def calls():
    return len(COUNTER)

def threaded():
    import threading
    results = []
    worker = threading.Thread(target=lambda: results.append(math.factorial(5)))
    worker.start()
    worker.join()
    return results
'''


def test_isolation_reports_what_is_in_force(sandbox: Sandbox) -> None:
    assert re.fullmatch(r"(bwrap|namespaces)\+seccomp\+rlimits\+cgroup[12]", sandbox.isolation)
    info = sandbox.worker_info
    assert info["uid"] != 0 and info["seccomp"] is True
    assert info["rlimits"]["memory_bytes"] == 512 << 20


def test_load_lists_functions_and_reports_bad_sources(sandbox: Sandbox) -> None:
    loaded = sandbox.load([TOOLS, "def broken(:\n    pass", "raise RuntimeError('at import')"])
    assert set(loaded.functions) == {"add", "odd_values", "fails", "big", "calls", "threaded"}
    assert len(loaded.errors) == 2
    assert loaded.errors[0].startswith("source 1: SyntaxError")
    assert loaded.errors[1] == "source 2: RuntimeError: at import"


def test_calls_return_values_output_and_errors(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])
    result = sandbox.call("add", {"a": 2, "b": 3})
    assert (result.status, result.value, result.stdout, result.truncated) == ("ok", 5, "adding 2 3\n", False)
    assert result.latency_ms > 0
    assert sandbox.call("odd_values", {}).value == {
        "set": "{1}",
        "tuple": [1, 2],
        "nan": pytest.approx(float("nan"), nan_ok=True),
    }
    failed = sandbox.call("fails", {"reason": "no such person"})
    assert (failed.status, failed.error) == ("error", "ValueError: no such person")
    unknown = sandbox.call("nope", {})
    assert unknown.status == "error" and "nope" in unknown.error
    wrong = sandbox.call("add", {"c": 1})
    assert wrong.status == "error" and wrong.error.startswith("TypeError")
    assert sandbox.call("threaded", {}).value == [120]


def test_large_results_and_output_are_capped(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])
    small = sandbox.call("big", {"n": 500})
    assert small.value == "x" * 500 and not small.truncated
    large = sandbox.call("big", {"n": 5000})
    assert large.status == "ok" and large.truncated
    assert large.value.startswith("x" * 100) and "truncated" in large.value and len(large.value) < 1100
    printed = sandbox.execute("for i in range(100):\n    print('line', i)")
    assert printed.truncated and len(printed.stdout) < 300 and "output truncated" in printed.stdout


def test_each_load_is_a_fresh_episode(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])
    sandbox.call("add", {"a": 1})
    assert sandbox.call("calls", {}).value == 1
    sandbox.load([TOOLS])
    assert sandbox.call("calls", {}).value == 0


def test_timeout_replaces_the_worker_and_reloads_the_episode(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS, "def spin():\n    while True:\n        pass"])
    sandbox.call("add", {"a": 1})
    result = sandbox.call("spin", {}, timeout=0.5)
    assert result.status == "timeout" and "0.5 s" in result.error
    assert sandbox.call("calls", {}).value == 0  # a replacement worker with the sources loaded afresh
    assert sandbox.call("add", {"a": 40, "b": 2}).value == 42


def test_execute_returns_the_last_expression_and_records_tool_calls(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])
    seen = []

    def hook(name: str, arguments: dict) -> str | None:
        seen.append((name, arguments))
        return "add refuses negative numbers" if arguments.get("a", 0) < 0 else None

    code = (
        "total = add(2, b=5)\ntry:\n    add(-1)\nexcept Exception as exc:\n    refused = str(exc)\n"
        "[total, refused]"
    )
    result = sandbox.execute(code, on_tool_call=hook)
    assert result.status == "ok"
    assert result.value == [7, "add refuses negative numbers"]
    assert seen == [("add", {"a": 2, "b": 5}), ("add", {"a": -1})]
    assert [call["status"] for call in result.tool_calls] == ["ok", "refused"]
    assert result.tool_calls[0]["value"] == 7
    assert result.tool_calls[1]["error"] == "add refuses negative numbers"
    assert sandbox.execute("def broken(:").status == "error"


def test_a_raising_hook_propagates_and_leaves_the_sandbox_usable(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])

    def hook(name: str, arguments: dict) -> str | None:
        raise KeyError("host bug")

    with pytest.raises(KeyError):
        sandbox.execute("add(1)", on_tool_call=hook)
    assert sandbox.call("add", {"a": 1}).value == 2


def test_set_up_given_to_load_runs_between_the_request_and_the_reply(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``meanwhile`` is the caller's own set-up, run while the worker loads: after the load request is
    written and before its reply is read, once."""
    events = []
    request, receive = WorkerConnection.request, PausingConnection.receive

    def recorded_request(self: WorkerConnection, message: dict, deadline: float) -> str:
        events.append(f"request {message['op']}")
        return request(self, message, deadline)

    def recorded_receive(self: PausingConnection, deadline: float, request_id: str | None = None) -> dict:
        reply = receive(self, deadline, request_id)
        if reply["type"] != "ready":  # not a spare starting meanwhile on the pool's thread
            events.append(f"reply {reply['type']}")
        return reply

    monkeypatch.setattr(WorkerConnection, "request", recorded_request)
    monkeypatch.setattr(PausingConnection, "receive", recorded_receive)
    loaded = sandbox.load([TOOLS], meanwhile=lambda: events.append("set up"))
    assert events == ["request load", "set up", "reply loaded"]
    assert "add" in loaded.functions and sandbox.call("add", {"a": 1}).value == 2


@pytest.mark.parametrize("failure", [KeyError("host bug"), WorkerTimeoutError("host bug")])
def test_a_failing_set_up_propagates_and_leaves_no_episode(sandbox: Sandbox, failure: Exception) -> None:
    """If ``meanwhile`` raises (even an error of the sandbox's own kinds), the exception reaches the
    caller, no episode is loaded (the half-loaded worker is gone) and the next load is a good episode."""

    def broken_set_up() -> None:
        raise failure

    with pytest.raises(type(failure), match="host bug"):
        sandbox.load([TOOLS], meanwhile=broken_set_up)
    with pytest.raises(SandboxError, match="no episode is loaded"):
        sandbox.call("add", {"a": 1})
    assert sandbox.load([TOOLS]).errors == ()
    assert sandbox.call("add", {"a": 1}).value == 2


def test_a_set_up_cannot_use_the_sandbox_it_runs_for(sandbox: Sandbox) -> None:
    sandbox.load([TOOLS])
    with pytest.raises(SandboxError, match="meanwhile cannot use the sandbox"):
        sandbox.load([TOOLS], meanwhile=lambda: sandbox.call("add", {"a": 1}))
    assert sandbox.load([TOOLS]).errors == ()
    assert sandbox.call("add", {"a": 1}).value == 2


def test_call_before_load_is_a_usage_error() -> None:
    require_isolation("bwrap")
    with make_sandbox("process", spares=0) as box, pytest.raises(SandboxError, match="load"):
        box.call("add", {"a": 1})


def test_closed_sandbox_refuses_calls() -> None:
    require_isolation("bwrap")
    box = make_sandbox("process", spares=0)
    box.load([TOOLS])
    box.close()
    with pytest.raises(SandboxError, match="closed"):
        box.call("add", {"a": 1})


def test_weaker_levels_are_explicit_and_reported() -> None:
    with ProcessSandbox(isolation="none", seccomp=False, spares=0, cgroup="none") as box:
        assert box.isolation == "rlimits"
        box.load(["def uid():\n    import os\n    return os.getuid()"])
        assert box.call("uid", {}).status == "ok"
    require_isolation("bwrap")
    with ProcessSandbox(isolation="bwrap", seccomp=False, spares=0, cgroup="none") as box:
        assert box.isolation == "bwrap+rlimits"
        assert box.worker_info["seccomp"] is False and box.worker_info["uid"] != 0


def test_isolation_none_started_as_root_runs_tool_code_as_nobody(tmp_path: Path) -> None:
    """Without a view, root's tool code would read every file of the machine (/etc/shadow): started as
    root, the worker drops to the unprivileged uid at ``none`` too, and reads no file only root may."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("dropping from root needs the tests to run as root in CI")
        pytest.skip("dropping from root needs root")
    secret = tmp_path / "secret"
    secret.write_text("root's own")
    secret.chmod(0o600)
    tools = f"def peek():\n    import os\n    return [os.getuid(), open({str(secret)!r}).read()]"
    with ProcessSandbox(isolation="none", spares=0, cgroup="none") as box:
        assert box.isolates_files is False and box.worker_info["uid"] == isolation.UNPRIVILEGED_UID
        box.load([tools])
        refused = box.call("peek", {})
        assert refused.status == "error" and "PermissionError" in str(refused.error), refused
        box.load(["def uid():\n    import os\n    return os.getuid()"])  # the next episode's worker
        assert box.call("uid", {}).value == isolation.UNPRIVILEGED_UID


def test_unavailable_isolation_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    with pytest.raises(IsolationUnavailableError, match="apt-get install bubblewrap"):
        make_sandbox("process", isolation="bwrap")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"isolation": "chroot"}, "valid: auto, bwrap, namespaces, none"), ({"policy": "strict"}, "restricted")],
)
def test_bad_options_are_config_errors(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_sandbox("process", **options)


def test_unknown_backend_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: process, docker"):
        make_sandbox("vm")


@pytest.mark.parametrize("level", ISOLATED_LEVELS)
def test_cpu_limit_and_crashes_cost_only_the_worker(level: str) -> None:
    require_isolation(level)
    with make_sandbox("process", isolation=level, cpu_seconds=1, timeout=10.0, spares=1) as box:
        crash = "def crash():\n    import ctypes\n    return ctypes.string_at(0)"
        box.load(["def spin():\n    while True:\n        pass", crash, "def ok():\n    return 1"])
        spun = box.call("spin", {})
        assert spun.status == "resource_limit" and "SIGXCPU" in spun.error
        crashed = box.call("crash", {})
        assert crashed.status == "error" and "SIGSEGV" in crashed.error
        assert box.call("ok", {}).value == 1


def test_a_source_that_hangs_while_loading_costs_only_the_load(sandbox: Sandbox) -> None:
    """The trap builds an endless list: the load timeout or the memory limit stops it, whichever trips
    first on this machine. Either way the trap never loads, the error names the limit, whatever did load
    works, and the next episode loads normally."""
    hanging = "def trap(x=[n for n in iter(int, 1)]):\n    return x"  # the default argument never ends
    loaded = sandbox.load([hanging, TOOLS])
    assert "trap" not in loaded.functions
    assert len(loaded.errors) == 1 and re.search(r"timeout|timed out|memory", loaded.errors[0], re.IGNORECASE)
    if loaded.functions:  # the memory limit tripped inside the source: only that source failed
        assert "add" in loaded.functions and sandbox.call("add", {"a": 1}).value == 2
    else:  # the load timed out: the worker was replaced and nothing is loaded in this episode
        assert sandbox.call("add", {"a": 1}).status == "error"
    sandbox.load([TOOLS])
    assert sandbox.call("add", {"a": 1}).value == 2


def test_the_worker_sees_only_its_view(sandbox: Sandbox) -> None:
    """The interpreter (even under a 0700 home), the system libraries and the worker's folder; not the data,
    the repository, home directories or the host's /dev/shm."""
    view = worker_view()
    tops = {Path(path).parts[1] for path in view.binds} | {Path(path).name for path, _ in view.symlinks}
    probe = (
        "def probe(paths):\n    import os, decimal, statistics, xml.etree.ElementTree, sqlite3, ctypes\n"
        "    return [sorted(os.listdir('/')), [os.path.exists(path) for path in paths]]"
    )
    hidden = [os.environ.get("HOPGYM_DATA", "/work"), str(ROOT / "tasks"), os.path.expanduser("~/.cache")]
    sandbox.load([probe])
    result = sandbox.call("probe", {"paths": [*hidden, *view.binds]})
    assert result.status == "ok", result.error
    listed, exists = result.value
    assert set(listed) == tops | {"dev", "proc", "tmp"}
    assert exists == [False] * len(hidden) + [True] * len(view.binds)


def test_workers_run_the_compiled_worker_and_it_matches_the_source(sandbox: Sandbox) -> None:
    program = Path(worker_program())
    assert program.suffix == ".pyc" and program.parent.name == "__pycache__"
    code = marshal.loads(program.read_bytes()[16:])  # after the 16-byte pyc header
    assert code.co_consts == compile(WORKER_SCRIPT.read_text(), str(WORKER_SCRIPT), "exec").co_consts
    sandbox.load(["def ok():\n    return 'ok'"])
    assert sandbox.call("ok", {}).value == "ok"


def test_a_read_only_install_runs_the_worker_from_source(monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", str(WORKER_SCRIPT.parent / "__pycache__"))

    monkeypatch.setattr(py_compile, "compile", read_only)
    assert worker_program.__wrapped__() == str(WORKER_SCRIPT)


@pytest.mark.parametrize("level", ISOLATED_LEVELS)
def test_a_checkout_under_a_hidden_folder_in_tmp_still_runs(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest's tmp_path lies under a 0700 folder in /tmp: the worker's private /tmp must show it."""
    require_isolation(level)
    checkout = tmp_path / "checkout" / "sandbox"
    checkout.mkdir(parents=True)
    for name in WORKER_FILES:
        shutil.copy(WORKER_SCRIPT.with_name(name), checkout / name)
    monkeypatch.setattr(isolation, "WORKER_SCRIPT", checkout / "worker.py")
    monkeypatch.setattr(isolation, "worker_program", lambda: str(checkout / "worker.py"))
    with make_sandbox("process", isolation=level) as box:
        box.load([f"import os\ndef where():\n    return sorted(os.listdir({str(checkout)!r}))\n"])
        result = box.call("where", {})
    assert result.status == "ok", result.error
    assert result.value == sorted(WORKER_FILES)


LOADED_HOPGYM = """
import sys
def loaded():
    return sorted(name for name in sys.modules if name.split(".")[0] == "hopgym")
def import_host_module():
    import hopgym.sandbox.isolation
"""


def test_the_worker_runs_its_own_modules_and_none_of_the_hosts(sandbox: Sandbox) -> None:
    """The worker's folder (in its view) holds the host's sandbox modules too; only the worker's own are
    importable there: hopgym's ``__init__`` and the host's modules (secrets, data paths) never run."""
    sandbox.load([LOADED_HOPGYM])
    loaded = sandbox.call("loaded", {})
    assert loaded.status == "ok", loaded.error
    own = {f"hopgym.sandbox.{Path(name).stem}" for name in WORKER_FILES} - {"hopgym.sandbox.worker"}
    assert set(loaded.value) == {"hopgym", "hopgym.sandbox"} | own - {"hopgym.sandbox.policy"}
    refused = sandbox.call("import_host_module", {})
    assert refused.status == "error" and refused.error.startswith("ModuleNotFoundError"), refused.error
    assert "hopgym.errors" in refused.error
    assert sandbox.call("loaded", {}).value == loaded.value  # the worker still serves, nothing more loaded


def test_the_report_lists_the_cgroup_limits_and_the_view(sandbox: Sandbox) -> None:
    report = sandbox.report
    assert report["cgroup"]["max_tasks"] == 64
    assert report["cgroup"]["memory_bytes"] == (512 + 64 + 64) << 20
    assert sandbox.isolation.endswith("+cgroup" + report["cgroup"]["version"][1:])
    assert set(report["view"]["read_only"]) == set(worker_view().binds)


def test_cgroup_modes_are_checked() -> None:
    with pytest.raises(ConfigError, match="valid: auto, v2, v1, none"):
        ProcessSandbox(cgroup="v3")
    with ProcessSandbox(isolation="none", cgroup="none") as box:
        assert box.report["cgroup"] == {"version": "none"} and "cgroup" not in box.isolation


def test_groups_of_other_owners_beside_the_workers_are_left_alone() -> None:
    """The attack suite's own ``hopgym-attacks-<pid>`` group sits where worker groups go: starting a
    sandbox must neither fail on it nor remove it."""
    require_isolation("bwrap")
    plan = resolve_cgroups("auto", 64, 1 << 30)
    foreign = [parent / f"hopgym-attacks-{os.getpid()}" for parent in plan.parents]
    for group in foreign:
        group.mkdir(exist_ok=True)
    try:
        with ProcessSandbox(isolation="bwrap", spares=0) as box:
            box.load(["def ping():\n    return 'pong'\n"])
            assert box.call("ping", {}).value == "pong"
        assert all(group.is_dir() for group in foreign)
    finally:
        for group in foreign:
            group.rmdir()


def test_a_host_in_another_pid_namespace_leaves_a_live_hosts_new_group_alone() -> None:
    """The contained attack suite runs its sandboxes in a PID namespace of its own, beside the test
    worker that runs the rest: its sweep of dead hosts' groups saw no such PID as this host's, took the
    group this host had just made (empty until the worker joins) for a dead host's and removed it, and
    the worker failed to start. Only a host of the same namespace may judge a PID dead."""
    plan = resolve_cgroups("auto", 64, 1 << 30)
    group = WorkerCgroup(plan)
    try:
        sweep = "from hopgym.sandbox.cgroups import resolve_cgroups; resolve_cgroups('auto', 64, 1 << 30)"
        command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", sweep]
        subprocess.run(command, check=True, timeout=60)
        assert all(path.is_dir() for path in group.groups)
    finally:
        group.remove()


def test_the_groups_a_dead_host_left_are_removed_by_the_next_start() -> None:
    host = subprocess.run(
        [sys.executable, "-c", "from hopgym.sandbox.cgroups import *; "
         "print(WorkerCgroup(resolve_cgroups('auto', 64, 1 << 30)).groups[0].name)"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    name = host.stdout.strip()
    assert name.startswith("hopgym-")
    plan = resolve_cgroups("auto", 64, 1 << 30)
    assert [parent / name for parent in plan.parents if (parent / name).exists()] == []


def test_a_call_can_return_the_json_text_its_worker_made(sandbox: Sandbox) -> None:
    """The official ToolHop protocol shows the model ``json.dumps(result, ensure_ascii=False)``; a result
    with no JSON text fails with json's own error, as in the official code."""
    sandbox.load(["def good():\n    return {'name': 'Zoë', 'n': 1}\n", "def bad():\n    return {1, 2}\n"])
    good = sandbox.call("good", {}, as_json_text=True)
    assert (good.status, good.value) == ("ok", '{"name": "Zoë", "n": 1}')
    bad = sandbox.call("bad", {}, as_json_text=True)
    assert bad.status == "error" and bad.error == "TypeError: Object of type set is not JSON serializable"
    assert sandbox.call("bad", {}).value == "{1, 2}"  # without it, the host gets a JSON value (here a repr)


def test_pausing_the_worker_between_calls_wakes_no_relay() -> None:
    """The worker is stopped after each call and continued for the next; its parent in ``namespaces`` mode
    (a relay that waits on a pidfd) must sleep through that, or every call pays two more context switches.
    Under bwrap the parent is bwrap's own init, which does wake (see docs/benchmarks.md)."""
    require_isolation("namespaces")
    sandbox = make_sandbox("process", isolation="namespaces")
    sandbox.load([TOOLS])
    worker = sandbox._current().connection.pause_pid
    parent = _proc_status(worker)["PPid"]

    def switches() -> int:
        return int(_proc_status(parent)["voluntary_ctxt_switches"])

    before = switches()
    try:
        for _ in range(200):
            assert sandbox.call("add", {"a": 1}).status == "ok"
        assert switches() - before < 20
    finally:
        sandbox.close()


def _proc_status(pid: int | str) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, value in (line.split(":", 1) for line in lines)}


def test_host_compiled_code_runs_instead_of_the_text_and_loads_alike(sandbox: Sandbox) -> None:
    """Code the host compiled once (``compile_tool_code``) is what the worker runs, with the same functions,
    postponed annotations and load errors as its text; code the worker cannot run falls back to the text."""
    sources = [
        "def which():\n    return 'text'\n",
        "def notes(x: Undefined) -> int:\n    return dict(notes.__annotations__)\n",
        "return 1",
        "raise RuntimeError('at import')",
    ]
    compiled = [compile_tool_code(source, index) for index, source in enumerate(sources)]
    assert compiled[2] is None, "'return' outside a function compiles nowhere: the worker reports it"
    assert sandbox.worker_info["bytecode"] == importlib.util.MAGIC_NUMBER.hex()
    as_text = sandbox.load(sources)
    text_notes = sandbox.call("notes", {"x": 1}).value
    compiled[0] = compile_tool_code("def which():\n    return 'code'\n", 0)  # tells which one ran
    assert sandbox.load(sources, compiled) == as_text
    assert as_text.errors == (
        "source 2: SyntaxError: 'return' outside function (<tool source 2>, line 1)",
        "source 3: RuntimeError: at import",
    )
    assert sandbox.call("which", {}).value == "code"
    assert sandbox.call("notes", {"x": 1}).value == text_notes == {"x": "Undefined", "return": "int"}
    foreign = [None if code is None else b"\x00\x00\r\n" + code[4:] for code in compiled]
    assert sandbox.load(sources, foreign) == as_text
    assert sandbox.call("which", {}).value == "text", "code of another Python version is never sent"
    with pytest.raises(SandboxError, match="3 compiled codes were given for 4 sources"):
        sandbox.load(sources, compiled[:3])
