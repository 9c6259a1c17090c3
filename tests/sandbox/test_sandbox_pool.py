"""The worker pool's spares, with an in-process launcher that starts workers when the test says so."""

from __future__ import annotations

import threading

import pytest

from hopgym.errors import SandboxError
from hopgym.sandbox.pool import Launcher, WorkerHandle, WorkerPool


class GatedLauncher(Launcher):
    """Starts a stand-in worker once ``gate`` is open, or fails with ``error``."""

    def __init__(self, error: SandboxError | None = None) -> None:
        self.gate = threading.Event()
        self.started = 0
        self.error = error

    def start(self) -> WorkerHandle:
        self.gate.wait()
        if self.error is not None:
            raise self.error
        self.started += 1
        info = {"n": self.started}
        return WorkerHandle(connection=None, info=info, kill=lambda: None, exit_status=lambda: None)


def test_waiting_until_warm_returns_once_every_spare_has_started() -> None:
    launcher = GatedLauncher()
    pool = WorkerPool(launcher, spares=2)
    try:
        with pytest.raises(SandboxError, match=r"2 of 2 spare sandbox workers were not ready after 0\.1 s"):
            pool.wait_until_warm(timeout=0.1)
        launcher.gate.set()
        pool.wait_until_warm(timeout=10)
        assert launcher.started == 2
        assert pool.acquire().info["n"] in (1, 2)
    finally:
        pool.close()


def test_a_failing_start_ends_the_wait_and_is_raised_by_acquire() -> None:
    launcher = GatedLauncher(error=SandboxError("bwrap: no permission"))
    launcher.gate.set()
    pool = WorkerPool(launcher, spares=1)
    try:
        pool.wait_until_warm(timeout=10)
        with pytest.raises(SandboxError, match="no permission"):
            pool.acquire()
    finally:
        pool.close()


def test_a_deferred_refill_waits_for_the_block_or_for_someone_who_needs_a_spare() -> None:
    """The episode that takes a ready spare has its first request answered before the next spare starts;
    a second acquire inside the block (a failed load's replacement) gets a start at once, not a deadlock."""
    launcher = GatedLauncher()
    launcher.gate.set()
    pool = WorkerPool(launcher, spares=1)
    try:
        pool.wait_until_warm(timeout=10)
        with pool.refill_deferred() as spare_ready:
            assert spare_ready
            assert pool.acquire().info["n"] == 1
            with pytest.raises(SandboxError, match="not ready after"):
                pool.wait_until_warm(timeout=0.2)  # deferred: nothing starts meanwhile
            assert launcher.started == 1
            assert pool.acquire().info["n"] == 2  # someone waits: the refill goes on
        pool.wait_until_warm(timeout=10)
        assert launcher.started == 3
        launcher.gate.clear()
        pool.acquire()
        with pool.refill_deferred() as spare_ready:
            assert not spare_ready  # no spare ready, its start under way: nothing is deferred
        launcher.gate.set()
    finally:
        pool.close()
