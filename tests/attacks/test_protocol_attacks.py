"""Attacks on the host side of the worker protocol: forged, stale, malformed and oversized replies, a worker
that stops reading, a code block that floods the host with tool calls, values that cannot be shown. Each
must cost at most the worker (killed and replaced) and one call recorded as an error; the host never hangs,
never crashes, and never takes one call's result for another's."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from hopgym.errors import SandboxError
from hopgym.sandbox import Sandbox
from hopgym.sandbox.cgroups import resolve_cgroups
from hopgym.sandbox.isolation import WorkerLimits, resolve_isolation
from hopgym.sandbox.launcher import ProcessLauncher
from hopgym.sandbox.limits import cgroup_memory_bytes
from hopgym.sandbox.pool import Launcher, WorkerHandle
from hopgym.sandbox.pooled import DEFAULT_MAX_TOOL_CALLS, PooledSandbox
from tests.attacks.test_attacks import BENIGN, attack
from tests.extras import require_isolation

pytestmark = [pytest.mark.attack, pytest.mark.host_side]

CHANNEL = "import gc\n_channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
"""Tool code that finds the worker's own protocol channel (tool code shares the worker's process)."""
FORGED_RESULT = (
    '{"type": "result", "status": "ok", "value": "forged", "error": None, "stdout": "", "truncated": False}'
)


def echo(sandbox: Sandbox, x: int) -> None:
    """The next call in this episode gets its own result."""
    result = sandbox.call("still_works", {"x": x})
    assert result.status == "ok" and result.value == {"echo": x}, result


def test_a_forged_reply_with_an_earlier_calls_id_is_never_taken_for_a_later_result(sandbox: Sandbox) -> None:
    """Tool code keeps the id of one call's request and, during a later call, writes a result under it before
    the real reply (deterministic: no thread racing the host). The later call is a protocol error, never the
    forged value, and the calls after it get their own results. (A line under the current id is the running
    tool's own answer: tool code shares the worker's process, so only stale ids can be told apart.)"""
    forger = CHANNEL + (
        "_seen = []\n"
        "def attack():\n"
        "    _seen.append(_channel.request_id)\n"
        "    return 'real'\n"
        "def trigger():\n"
        "    current, _channel.request_id = _channel.request_id, _seen[0]\n"
        f"    _channel.send({FORGED_RESULT})\n"
        "    _channel.request_id = current\n"
        "    return 'triggered'\n"
    )
    assert sandbox.load([forger, BENIGN]).errors == ()
    assert sandbox.call("attack", {}).value == "real"
    forged = sandbox.call("trigger", {})
    assert forged.status == "error" and "protocol" in (forged.error or "") and forged.value is None, forged
    for x in range(1, 4):
        echo(sandbox, x)  # nothing is shifted by one afterwards


def test_a_forged_loaded_reply_is_a_failed_load_not_a_crash(sandbox: Sandbox) -> None:
    forger = CHANNEL + '_channel.send({"type": "loaded", "functions": 5, "errors": None})\n'
    loaded = sandbox.load([forger, BENIGN])
    assert loaded.functions == ()
    assert len(loaded.errors) == 1 and "protocol" in loaded.errors[0], loaded
    sandbox.load([BENIGN])
    echo(sandbox, 3)


def test_a_result_with_lone_surrogates_arrives_as_valid_unicode(sandbox: Sandbox) -> None:
    result = attack(sandbox, "print('\\udfff')\nreturn {'\\ud800key': ['a\\ud800', '\\ud83d\\ude00']}")
    assert result.status == "ok", result
    assert result.value == {"\ufffdkey": ["a\ufffd", "\U0001f600"]}
    json.dumps([result.value, result.stdout], ensure_ascii=False).encode("utf-8")
    failed = attack(sandbox, "raise ValueError('bad \\udc80 text')")
    assert failed.error == "ValueError: bad \ufffd text"


@pytest.mark.parametrize("raised", ["ZeroDivisionError", "SystemExit", "KeyboardInterrupt"])
def test_a_hostile_repr_does_not_crash_the_worker(sandbox: Sandbox, raised: str) -> None:
    body = f"class Evil:\n    def __repr__(self):\n        raise {raised}()\nreturn Evil()"
    result = attack(sandbox, body)
    assert result.status == "ok", result
    assert result.value.startswith("<unrepresentable Evil"), result


def test_a_worker_that_stops_reading_costs_one_deadline(sandbox: Sandbox) -> None:
    deaf = CHANNEL + (
        "import time\n"
        "_channel.receive = lambda: time.sleep(3600)\n"  # the worker never reads its input again
        "def ping(x):\n    return 1\n"
    )
    assert sandbox.load([deaf]).errors == ()
    result = sandbox.call("ping", {"x": "y" * (4 << 20)})  # far more than a pipe or socket buffer holds
    assert result.status == "timeout", result
    sandbox.load([BENIGN])
    echo(sandbox, 4)


def test_an_oversized_reply_is_refused_before_it_is_parsed(sandbox: Sandbox) -> None:
    body = CHANNEL + (  # 7.8 MB of empty objects: millions of dicts, were the host to parse it
        "import os\n"
        'line = b\'{"type": "result", "id": "\' + _channel.request_id.encode() + b\'", "status": "ok", \'\n'
        'line += b\'"error": null, "stdout": "", "truncated": false, "value": [\' + b\'{},\' * 2600000\n'
        "line += b'{}]}\\n'\n"
        "view = memoryview(line)\n"
        "while view:\n"
        "    view = view[os.write(_channel._out, view):]\n"
        "return 'sent'"
    )
    tracemalloc.start()
    try:
        result = attack(sandbox, body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status == "error" and "longer than" in result.error, result.error
    assert peak < 64 << 20, f"the host held {peak >> 20} MiB while refusing the reply"


def test_a_tool_call_flood_from_code_is_capped_on_the_host(sandbox: Sandbox) -> None:
    assert sandbox.load([BENIGN]).errors == ()
    result = sandbox.execute("for i in range(100000):\n    still_works(x=i)", timeout=120)
    assert result.status == "resource_limit", result
    assert f"more than {DEFAULT_MAX_TOOL_CALLS} tool calls" in result.error
    assert len(result.tool_calls) == DEFAULT_MAX_TOOL_CALLS
    assert result.tool_calls[-1]["value"] == {"echo": DEFAULT_MAX_TOOL_CALLS - 1}
    echo(sandbox, 5)


def test_code_cannot_forge_a_call_record(sandbox: Sandbox) -> None:
    assert sandbox.load([BENIGN]).errors == ()
    forged = '{"type": "tool_done", "status": "ok", "error": None, "value": "invented"}'
    result = sandbox.execute(CHANNEL + f"still_works(x=1)\n_channel.send({forged})\n'done'")
    assert result.status == "error" and "protocol" in result.error, result
    assert [(call["arguments"], call["status"], call["value"]) for call in result.tool_calls] == [
        ({"x": 1}, "ok", {"echo": 1})
    ]
    echo(sandbox, 6)


def test_code_cannot_reach_a_tool_without_the_host_seeing_the_call(sandbox: Sandbox) -> None:
    assert sandbox.load([BENIGN]).errors == ()
    seen: list[tuple[str, dict]] = []
    code = (
        "import gc\n"
        "cells = [cell.cell_contents for cell in still_works.__closure__ or ()]\n"
        "found = [o for o in cells + gc.get_objects() if callable(o) and o is not still_works\n"
        "         and getattr(o, '__name__', '') == 'still_works']\n"
        "[f(x=2) for f in found] or 'unreachable'"
    )
    result = sandbox.execute(code, on_tool_call=lambda name, arguments: seen.append((name, arguments)))
    assert result.status == "ok", result
    assert result.value == "unreachable"
    assert result.tool_calls == () and seen == []
    echo(sandbox, 9)


class _FailingSecondStart(Launcher):
    """A real process launcher whose second start fails, as a start does when the machine is out of PIDs."""

    def __init__(self, launcher: Launcher) -> None:
        self._launcher = launcher
        self.starts = 0

    def start(self) -> WorkerHandle:
        self.starts += 1
        if self.starts == 2:
            raise SandboxError("cannot start a worker: Resource temporarily unavailable")
        return self._launcher.start()


def test_the_sandbox_recovers_when_a_spare_fails_to_start(attack_limits: dict[str, float]) -> None:
    require_isolation("bwrap")
    limits = WorkerLimits(memory_mb=256)
    cgroups = resolve_cgroups("auto", 64, cgroup_memory_bytes(limits))
    launcher = ProcessLauncher(resolve_isolation("bwrap", True), limits, None, cgroups)
    sandbox = PooledSandbox(_FailingSecondStart(launcher), "bwrap+seccomp", timeout=attack_limits["timeout"])
    try:
        sandbox.load([BENIGN])
        echo(sandbox, 7)
        with pytest.raises(SandboxError, match="Resource temporarily unavailable"):
            sandbox.load([BENIGN])  # the spare that should take over failed to start
        sandbox.load([BENIGN])  # the next episode gets the worker started after the failure
        echo(sandbox, 8)
    finally:
        sandbox.close()
        launcher.close()
