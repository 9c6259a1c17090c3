"""Stopping a run: Ctrl-C and SIGTERM must stop it wherever the main thread happens to be."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from hopgym.agents.evaluation.runner import run_to_completion


class SignalsFromAFinalizer:
    """Sends a signal to this process from ``__del__``: Python's own handler would raise the
    KeyboardInterrupt inside the finalizer, where it is printed and swallowed (as in aiohttp's)."""

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def __del__(self) -> None:
        os.kill(os.getpid(), self.sig)
        for _ in range(10_000):  # the handler runs at the next bytecode checks: still in here
            pass


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_during_a_finalizer_still_stops_the_run(sig: int) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    steps: list[str] = []

    async def main() -> None:
        try:
            SignalsFromAFinalizer(sig)  # dropped at once: __del__ runs here
            for _ in range(200):
                await asyncio.sleep(0.01)
            steps.append("ran to the end")
        finally:
            await asyncio.sleep(0)  # cleanup still gets to await
            steps.append("cleaned up")

    try:
        with pytest.raises(KeyboardInterrupt):
            run_to_completion(main())
        assert steps == ["cleaned up"]
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]  # handlers given back
    finally:
        signal.signal(signal.SIGTERM, before[signal.SIGTERM])


def test_a_run_that_is_not_stopped_returns_and_leaves_the_handlers_as_they_were() -> None:
    before = signal.getsignal(signal.SIGINT)
    run_to_completion(asyncio.sleep(0))
    assert signal.getsignal(signal.SIGINT) is before
