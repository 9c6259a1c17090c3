"""The docker backend on a real engine: container hardening, episodes, replacement, cleanup, clear errors.

Needs a reachable Docker engine and the sandbox image (``.ci/docker-setup.sh`` prepares both). In CI
(CI=true) a missing prerequisite fails; elsewhere it skips with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hopgym.errors import ConfigError, DockerUnavailableError, SandboxImageMissingError
from hopgym.sandbox import make_sandbox
from hopgym.sandbox.docker.backend import CONTAINER_USER, DockerSandbox
from hopgym.sandbox.docker.containers import (
    OWNER_LABEL,
    ProcessIdentity,
    list_sandbox_containers,
    owner_is_gone,
)
from hopgym.sandbox.docker.engine import connect_engine, require_image

pytestmark = pytest.mark.docker

ME = ProcessIdentity.of(os.getpid())


@pytest.fixture(scope="module")
def api() -> Any:
    """A client of the engine, once the engine and the sandbox image are known to be there."""
    try:
        client = connect_engine()
        require_image(client, "hopgym-sandbox:latest")
    except DockerUnavailableError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Docker tests must run in CI: {exc}")
        pytest.skip(str(exc))
    return client


@pytest.fixture(scope="module")
def sandbox(api: Any) -> Iterator[DockerSandbox]:
    box = make_sandbox("docker", timeout=2.0, result_cap=1000, output_cap=200)
    yield box
    box.close()
    assert my_containers(api) == []


def my_containers(api: Any) -> list[dict[str, Any]]:
    return list_sandbox_containers(api, owner=ME)


def current_container(api: Any, sandbox: DockerSandbox) -> dict[str, Any]:
    """The container serving the current episode."""
    return api.inspect_container(sandbox.worker_info["container"])


def wait_until(predicate, seconds: float = 10.0) -> bool:
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_each_worker_container_is_locked_down(api: Any, sandbox: DockerSandbox) -> None:
    assert sandbox.isolation == "docker+seccomp+rlimits"
    assert sandbox.worker_info["uid"] == 10001 and sandbox.worker_info["seccomp"] is True
    inspected = current_container(api, sandbox)
    host = inspected["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Memory"] == host["MemorySwap"] == (1024 + 64 + 64) << 20  # rlimit, /tmp, headroom
    assert host["PidsLimit"] == 64 and host["NanoCpus"] == 10**9
    assert host["Tmpfs"]["/tmp"].startswith("rw,noexec,nosuid,nodev,size=64m")
    assert inspected["Config"]["User"] == CONTAINER_USER
    assert inspected["Config"]["Labels"][OWNER_LABEL] == ME.label()


def test_inside_the_container_there_is_no_network_and_the_root_is_read_only(sandbox: DockerSandbox) -> None:
    sandbox.load(
        [
            "def interfaces():\n"
            "    lines = open('/proc/net/dev').readlines()[2:]\n"
            "    return sorted(line.split(':')[0].strip() for line in lines)\n"
            "def write(path):\n    open(path, 'w').write('x')\n    return path\n"
        ]
    )
    assert sandbox.call("interfaces", {}).value == ["lo"]
    assert sandbox.call("write", {"path": "/tmp/scratch"}).value == "/tmp/scratch"
    denied = sandbox.call("write", {"path": "/opt/hopgym/worker.py"})
    assert denied.status == "error" and "Read-only file system" in denied.error, denied


def test_calls_output_errors_and_code_execution(sandbox: DockerSandbox) -> None:
    loaded = sandbox.load(["def add(a, b=1):\n    print('adding', a, b)\n    return a + b\n", "def oops(:\n"])
    assert loaded.functions == ("add",) and len(loaded.errors) == 1
    result = sandbox.call("add", {"a": 2, "b": 3})
    assert (result.status, result.value, result.stdout) == ("ok", 5, "adding 2 3\n")
    assert sandbox.call("nope", {}).error.startswith("NameError")
    seen = []
    executed = sandbox.execute("x = add(1)\nprint(x)\nx * 10", on_tool_call=lambda n, a: seen.append((n, a)))
    assert (executed.status, executed.value, executed.stdout) == ("ok", 20, "adding 1 1\n2\n")
    assert seen == [("add", {"a": 1})]


def test_episodes_do_not_share_state(sandbox: DockerSandbox) -> None:
    sandbox.load(["STATE = []\ndef remember(x):\n    STATE.append(x)\n    open('/tmp/left', 'w').write(x)\n"])
    sandbox.call("remember", {"x": "first episode"})
    sandbox.load(["import os\ndef look():\n    return [os.path.exists('/tmp/left'), 'STATE' in globals()]\n"])
    assert sandbox.call("look", {}).value == [False, False]


def test_full_toolhop_libraries_are_in_the_image(sandbox: DockerSandbox) -> None:
    source = """
import pytz, dicttoxml
from datetime import datetime
from dateutil.relativedelta import relativedelta
from babel.numbers import format_currency

def use_them():
    when = datetime(2020, 1, 31, tzinfo=pytz.timezone('Europe/Paris')) + relativedelta(months=1)
    return [when.strftime('%Y-%m-%d'), format_currency(1234.5, 'EUR', locale='de_DE'),
            dicttoxml.dicttoxml({'a': 1}, attr_type=False).decode()]
"""
    assert sandbox.load([source]).errors == ()
    result = sandbox.call("use_them", {})
    assert result.status == "ok", result
    assert result.value[0] == "2020-02-29" and result.value[1] == "1.234,50\xa0€"
    assert "<a>1</a>" in result.value[2]


def test_a_hung_container_is_killed_and_replaced(api: Any, sandbox: DockerSandbox) -> None:
    sandbox.load(["def hang():\n    while True:\n        pass\n", "def ok():\n    return 'ok'\n"])
    hung = sandbox.worker_info["container"]
    result = sandbox.call("hang", {}, timeout=1.0)
    assert result.status == "timeout" and result.latency_ms >= 1000
    assert sandbox.call("ok", {}).value == "ok"  # the episode goes on in a replacement, sources reloaded
    assert sandbox.worker_info["container"] != hung
    assert wait_until(lambda: hung not in {c["Id"] for c in list_sandbox_containers(api)})


def test_a_crashed_container_is_replaced(sandbox: DockerSandbox) -> None:
    sandbox.load(["import os\ndef die():\n    os._exit(3)\n", "def ok():\n    return 'ok'\n"])
    crashed = sandbox.call("die", {})
    assert crashed.status == "error" and "exit code 3" in crashed.error, crashed
    assert sandbox.call("ok", {}).value == "ok"


def test_a_memory_bomb_is_a_resource_limit(api: Any) -> None:
    with make_sandbox("docker", memory_mb=128, spares=0) as box:
        box.load(
            ["def bomb():\n    blocks = []\n    while True:\n        blocks.append(bytearray(8 << 20))\n"]
        )
        assert box.call("bomb", {}).status == "resource_limit"


def test_restricted_policy_runs_in_the_container(api: Any) -> None:
    with make_sandbox("docker", policy="restricted", spares=0) as box:
        assert box.isolation == "docker+seccomp+rlimits+restricted"
        box.load(
            ["def total(values):\n    out = {'sum': 0}\n    out['sum'] += sum(values)\n    return out\n"]
        )
        assert box.call("total", {"values": [1, 2, 3]}).value == {"sum": 6}
        box.load(["def peek():\n    return ().__class__.__base__.__subclasses__()\n"])
        assert box.call("peek", {}).status == "error"


def test_close_removes_every_container(api: Any) -> None:
    """In a process of its own (its own owner label): this module's sandbox may start a spare while the
    test runs, and another test worker's containers are theirs."""
    holder = run_holder("close")
    owner = ProcessIdentity.of(holder.pid)
    try:
        assert wait_until(lambda: len(list_sandbox_containers(api, owner)) == 3)  # the worker and 2 spares
        holder.stdin.write("close\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "closed", holder.stderr.read()
        assert list_sandbox_containers(api, owner) == []
    finally:
        holder.kill()
        holder.wait()


HOLDER = """
import sys, time
from hopgym.sandbox import make_sandbox
box = make_sandbox("docker", spares=2)
box.load(["def f():\\n    return 1\\n"])
assert box.call("f", {}).value == 1
print("ready", flush=True)
if sys.argv[1] == "hold":
    time.sleep(600)
if sys.argv[1] == "close":
    sys.stdin.readline()
    box.close()
    print("closed", flush=True)
    time.sleep(600)
"""


def run_holder(mode: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
    return holder


def test_containers_of_a_sigkilled_host_are_gone_once_hopgym_starts_again(api: Any) -> None:
    holder = run_holder("hold")
    owner = ProcessIdentity.of(holder.pid)
    assert wait_until(lambda: len(list_sandbox_containers(api, owner)) >= 2)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # Its attach connections dropped: the containers' stdin closed and their workers exit by themselves.
    assert wait_until(lambda: all(c["State"] != "running" for c in list_sandbox_containers(api, owner)), 30)
    with make_sandbox("docker", spares=0):  # hopgym starting again reaps what the dead owner left
        assert list_sandbox_containers(api, owner) == []


def test_an_unclosed_sandbox_is_removed_at_interpreter_exit(api: Any) -> None:
    holder = run_holder("exit")
    owner = ProcessIdentity.of(holder.pid)
    holder.wait(timeout=60)
    assert holder.returncode == 0, holder.stderr.read()
    assert list_sandbox_containers(api, owner) == []


def test_owners_are_judged_by_pid_start_time_and_namespace() -> None:
    assert not owner_is_gone(ME.label(), ME)
    reused_pid = ProcessIdentity(ME.boot_id, ME.pid_namespace, ME.pid, ME.start_ticks + 1)
    assert owner_is_gone(reused_pid.label(), ME)
    other_namespace = ProcessIdentity(ME.boot_id, "pid:[1]", 999_999_999, 1)
    assert not owner_is_gone(other_namespace.label(), ME)  # cannot be checked from here: left alone
    assert not owner_is_gone("not a label", ME)


def test_a_missing_image_says_how_to_build_it(api: Any) -> None:
    with pytest.raises(SandboxImageMissingError, match="hopgym sandbox build"):
        make_sandbox("docker", image="hopgym-sandbox:no-such-tag")


def test_an_unreachable_engine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerUnavailableError, match="cannot reach the Docker engine at unix:///nonexistent"):
        make_sandbox("docker")


def test_an_absent_runtime_is_a_clear_error(api: Any) -> None:
    runtimes = json.dumps(sorted(api.info()["Runtimes"]))
    assert "runc" in runtimes
    with pytest.raises(DockerUnavailableError, match="no runtime 'hopgym-no-such-runtime'"):
        make_sandbox("docker", runtime="hopgym-no-such-runtime")


def test_bad_options_are_config_errors(api: Any) -> None:
    with pytest.raises(ConfigError, match="policy"):
        make_sandbox("docker", policy="lenient")
    with pytest.raises(ConfigError, match="spares"):
        make_sandbox("docker", spares=-1)


def test_gvisor_runtime_runs_the_worker_under_its_own_kernel(api: Any) -> None:
    if "runsc" not in api.info()["Runtimes"]:
        missing = "gVisor's runsc is not registered with the Docker engine (.ci/docker-setup.sh does it)"
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    with make_sandbox("docker", runtime="runsc", spares=0) as box:
        assert box.isolation == "docker[runsc]+seccomp+rlimits"
        assert box.worker_info["uid"] == 10001 and box.worker_info["seccomp"] is True
        box.load(["def kernel():\n    return open('/proc/version').read()\n"])
        host_kernel = Path("/proc/version").read_text()
        guest_kernel = box.call("kernel", {}).value
        assert guest_kernel != host_kernel and guest_kernel.startswith("Linux version")
