"""A host holding more than 1024 descriptors (a server with dozens of sessions, each with its sandbox's
pipes, pidfds and sockets) still runs sandboxes: every wait on a sandbox descriptor goes through ``poll``,
since ``select`` refuses a descriptor numbered 1024 or more ("filedescriptor out of range in select()")."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import pytest

from hopgym.sandbox import make_sandbox

_HELD = 1100

TOOLS = """
import time

def length(text):
    return len(text)

def shout(n):
    print("x" * n)
    return n

def hang():
    time.sleep(60)
"""


@pytest.fixture()
def many_fds() -> Iterator[None]:
    """Hold enough descriptors that every one the sandbox opens next is numbered past 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _HELD + 1024
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard limit on open files ({hard}) is below {wanted}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(_HELD)]
    try:
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)
        assert probe >= 1024, "the next descriptor the sandbox opens must be past select()'s limit"
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_calls_timeouts_and_new_episodes_work_past_1024_descriptors(many_fds: None, start: str) -> None:
    if start == "fork" and os.geteuid() != 0:
        pytest.skip("start='fork' needs root")
    with make_sandbox("process", start=start, timeout=1.0, output_cap=100_000) as box:
        assert box.load([TOOLS]).errors == ()
        big = "y" * 300_000  # more than a pipe holds: the host waits for the worker to read its input
        assert box.call("length", {"text": big}).value == len(big)
        printed = box.call("shout", {"n": 90_000})  # more than one read of the worker's output
        assert printed.status == "ok" and len(printed.stdout) >= 90_000
        hung = box.call("hang", {})
        assert hung.status == "timeout", hung
        for _ in range(3):  # new episodes: a fresh worker each (forked from the template, or spawned)
            assert box.load([TOOLS]).errors == ()
            assert box.call("length", {"text": "abc"}).value == 3
