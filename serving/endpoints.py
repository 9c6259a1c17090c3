"""Least-loaded choice among servers, with a cooldown for one that failed: the model client's servers and
the env servers of :mod:`hopgym.serving.remote_rollouts` are picked the same way."""

from __future__ import annotations

import time
from collections.abc import Sequence


class Endpoints:
    """The servers of one model. Each request goes to the server with the fewest requests in flight among
    those not cooling down (ties in turn); a server that failed transiently cools down, and is tried again
    once that is over. When every server is cooling down, the one that recovers first is used."""

    def __init__(self, bases: Sequence[str | None], cooldown: float, cooldown_max: float) -> None:
        self.bases = tuple(bases)
        self._cooldown = cooldown
        self._cooldown_max = cooldown_max
        self._in_flight = [0] * len(self.bases)
        self._failures = [0] * len(self.bases)
        self._down_until = [0.0] * len(self.bases)
        self._turn = 0

    def acquire(self) -> int:
        """The index of the server for the next request; pair with :meth:`release`."""
        count = len(self.bases)
        now = time.monotonic()
        candidates = [i for i in range(count) if self._down_until[i] <= now]
        if not candidates:
            candidates = [min(range(count), key=self._down_until.__getitem__)]
        choice = min(candidates, key=lambda i: (self._in_flight[i], (i - self._turn) % count))
        self._turn = (choice + 1) % count
        self._in_flight[choice] += 1
        return choice

    def release(self, index: int, failed: bool) -> None:
        self._in_flight[index] -= 1
        if not failed:
            self._failures[index] = 0
            self._down_until[index] = 0.0
            return
        self._failures[index] += 1
        cooldown = min(self._cooldown_max, self._cooldown * 2 ** (self._failures[index] - 1))
        self._down_until[index] = time.monotonic() + cooldown

    def any_available(self) -> bool:
        """Whether some server is not cooling down (a retry can go there at once)."""
        now = time.monotonic()
        return any(until <= now for until in self._down_until)
