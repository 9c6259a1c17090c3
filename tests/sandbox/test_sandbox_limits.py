"""Sandbox limits: one object checked in one place for both backends, and separate load and call deadlines.

The deadline tests sleep far from every limit they do not test (seconds against a 60 s deadline) and only
past the one they test, so their verdict does not depend on the machine's speed."""

from __future__ import annotations

import time

import pytest

from hopgym.errors import ConfigError
from hopgym.sandbox import make_sandbox
from hopgym.sandbox.limits import SandboxLimits

SLEEP_AT_LOAD = "import time\ntime.sleep({seconds})\n\ndef ready():\n    return 'ready'\n"
SLEEPY_CALL = "import time\n\ndef nap(seconds):\n    time.sleep(seconds)\n    return 'rested'\n"


def test_timeout_sets_both_deadlines_and_each_can_be_set_apart() -> None:
    assert SandboxLimits.of(timeout=3.0) == SandboxLimits(load_timeout=3.0, call_timeout=3.0)
    only_load = SandboxLimits.of(timeout=3.0, load_timeout=60.0)
    assert (only_load.load_timeout, only_load.call_timeout) == (60.0, 3.0)
    only_call = SandboxLimits.of(call_timeout=1.5)
    assert (only_call.load_timeout, only_call.call_timeout) == (5.0, 1.5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, r"load_timeout=0 is not a limit; valid: a positive number"),
        ({"call_timeout": -1.0}, r"call_timeout=-1\.0 is not a limit; valid: a positive number"),
        ({"load_timeout": float("inf")}, r"load_timeout=inf is not a limit"),
        ({"memory_mb": 0}, r"memory_mb=0 is not a limit; valid: a positive whole number"),
        ({"open_files": 1.5}, r"open_files=1\.5 is not a limit; valid: a positive whole number"),
        ({"max_tasks": True}, r"max_tasks=True is not a limit"),
        ({"max_tool_calls": -1}, r"max_tool_calls=-1 is not a limit; valid: a whole number, 0 or more"),
        ({"spares": -1}, r"spares=-1 is not a number of workers kept ready; valid: 0 or more"),
        ({"policy": "strict"}, r"policy='strict' is not a policy; valid: None, 'restricted'"),
        ({"memroy_mb": 256}, r"no option 'memroy_mb' \(did you mean 'memory_mb'\?\); valid: isolation, "),
        ({"cpus": 2.0}, r"no option 'cpus'; valid: .*load_timeout, call_timeout, memory_mb"),
    ],
)
def test_a_bad_limit_is_a_config_error_naming_it_and_the_valid_values(options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_sandbox("process", **options)


def test_a_slow_load_is_cut_at_the_load_deadline_and_calls_keep_theirs() -> None:
    with make_sandbox("process", load_timeout=1.0, call_timeout=60.0) as box:
        started = time.monotonic()
        loaded = box.load([SLEEP_AT_LOAD.format(seconds=30)])
        assert time.monotonic() - started < 20  # cut at the load deadline, not the call deadline
        assert loaded.functions == ()
        assert "wall-clock timeout after 1 s" in loaded.errors[0]
        assert box.load([SLEEPY_CALL]).functions == ("nap",)
        rested = box.call("nap", {"seconds": 2.5})  # past the load deadline: calls are not bound by it
        assert (rested.status, rested.value) == ("ok", "rested")


def test_a_slow_call_is_cut_at_the_call_deadline_and_loads_keep_theirs() -> None:
    with make_sandbox("process", load_timeout=60.0, call_timeout=1.0) as box:
        loaded = box.load([SLEEP_AT_LOAD.format(seconds=2.5) + SLEEPY_CALL])  # past the call deadline
        assert loaded.errors == () and set(loaded.functions) == {"ready", "nap"}
        started = time.monotonic()
        cut = box.call("nap", {"seconds": 30})
        assert time.monotonic() - started < 20  # cut at the call deadline, not the load deadline
        assert cut.status == "timeout" and "wall-clock timeout after 1 s" in cut.error
        assert box.call("ready", {}).value == "ready"  # the replacement reloaded the episode's sources
