"""The one pool of envs everything that serves them takes from: a cap on the envs alive at once, the set of
those alive, the rule for an env given back broken (out of the set, its place free at once, then closed:
no taker ever waits for an env that can no longer come) and the close of them all at the end.

Its users differ only in policy. :class:`~hopgym.serving.rollouts.Rollouts` waits for a free env
(:meth:`EnvPool.acquire`, from an event loop) and reuses envs episode after episode; the OpenEnv server
(``hopgym serve env``) refuses a session at once when full (:meth:`EnvPool.open`, from its threads) and
closes a session's env when the session ends (``reuse=False``). Every method is safe from any thread: the
server opens and releases from openenv's threads, and an asyncio waiter is woken in its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future

import gymnasium as gym

from hopgym.errors import ConfigError, EnvServerError

logger = logging.getLogger(__name__)
CLOSED = "this env pool was closed (its server or rollouts stopped); make a new one"


class _Place(enum.Enum):
    NEW = "new"
    """What :meth:`EnvPool._take` returns for a place the taker fills with a new env."""


class EnvPool:
    """Up to ``size`` envs made by ``make_env`` (``envs``: some made already). ``reuse``: a healthy env
    given back waits for the next taker (else it is closed). ``background``: the threads that make envs
    for :meth:`acquire` and close discarded ones, so that neither blocks an event loop; a discarded env's
    place is then free at once, while its close runs. Without them (None) a discarded env is closed in the
    thread that gave it back and its place is free once it is closed, so the cap bounds every env that
    exists, those closing included (a server's processes and open files). ``cap_name`` names the cap in
    error messages (the option a user sets it with)."""

    def __init__(
        self,
        make_env: Callable[[], gym.Env],
        size: int,
        *,
        envs: Iterable[gym.Env] = (),
        reuse: bool = True,
        background: Executor | None = None,
        cap_name: str = "size",
    ) -> None:
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"{cap_name} must be a positive integer, got {size!r}")
        self._make_env, self._size, self._reuse = make_env, size, reuse
        self._background, self._cap_name = background, cap_name
        self._lock = threading.Lock()
        self._live: dict[gym.Env, None] = dict.fromkeys(envs)
        """Every env made and not discarded, in the order made (a dict: an ordered set)."""
        self._idle: list[gym.Env] = list(self._live)
        self._places = len(self._live)
        """Places taken: the live envs, those being made and (without background threads) those closing."""
        self._waiters: list[asyncio.Future[None]] = []
        self._closing: dict[Future[None], gym.Env] = {}
        """Discarded envs whose close runs in the background (:meth:`close_all` waits for them)."""
        self._closed = False
        if self._places > size:
            raise ConfigError(f"{self._places} envs given to a pool of {size} ({cap_name})")

    @property
    def envs(self) -> list[gym.Env]:
        """The envs alive (idle or taken), in the order made."""
        with self._lock:
            return list(self._live)

    def _take(self) -> gym.Env | _Place | None:
        """Under the lock: an idle env, ``_Place.NEW`` (a place now taken, for a new env), or None (full)."""
        if self._closed:
            raise EnvServerError(CLOSED)
        if self._idle:
            return self._idle.pop()
        if self._places < self._size:
            self._places += 1
            return _Place.NEW
        return None

    def _make(self) -> gym.Env:
        """A new env for a place taken, listed in the thread that made it: one whose taker gave up meanwhile
        (a cancelled episode) is still listed, and closed with the others. A failed make frees its place."""
        try:
            env = self._make_env()
        except BaseException:
            self._free_place()
            raise
        with self._lock:
            closed = self._closed
            if not closed:
                self._live[env] = None
        if closed:  # close_all ran while it was being made: nobody else would close it
            env.close()
            raise EnvServerError(CLOSED)
        return env

    def _free_place(self) -> None:
        with self._lock:
            self._places -= 1
            self._wake()

    def _wake(self) -> None:
        """Under the lock, once the pool's state has changed: every waiting :meth:`acquire` looks again (an
        env came back or a place is free). A waiter whose loop has closed is waiting no more."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop closed (between any check and the call)
                waiter.get_loop().call_soon_threadsafe(_set_done, waiter)

    def open(self) -> gym.Env:
        """An env now, made in the calling thread if none is idle, or :class:`EnvServerError` at once when
        every place is taken: a server answers "try again later" rather than hold a request open."""
        with self._lock:
            taken = self._take()
        if taken is None:
            raise EnvServerError(
                f"at capacity: all {self._size} envs are in use ({self._cap_name}); try again later"
            )
        return self._make() if taken is _Place.NEW else taken

    async def acquire(self) -> gym.Env:
        """An env, made in the background threads if none is idle and the cap allows, else the next one
        given back or the next place freed (waiting for it)."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                taken = self._take()
                if taken is None:
                    waiter = loop.create_future()
                    self._waiters.append(waiter)
            if taken is _Place.NEW:
                return await self._made()
            if taken is not None:
                return taken
            await waiter

    async def _made(self) -> gym.Env:
        """:meth:`_make` in the background threads. If the taker is cancelled meanwhile, the env is given
        back once made (or its place freed, if its make never started)."""
        if self._background is None:
            self._free_place()
            raise RuntimeError("EnvPool.acquire needs the pool's background threads (background=)")
        try:
            made = self._background.submit(self._make)
        except RuntimeError:  # its threads stopped: the pool's owner is closing
            self._free_place()
            raise EnvServerError(CLOSED) from None
        try:
            return await asyncio.wrap_future(made)
        except asyncio.CancelledError:
            made.add_done_callback(self._give_back_made)
            raise

    def _give_back_made(self, made: Future[gym.Env]) -> None:
        if made.cancelled():
            self._free_place()
        elif made.exception() is None:  # a failed make freed its place itself
            self.release(made.result())

    async def fill(self) -> None:
        """Make an env for every free place (in the background threads), each idle for the next taker."""
        while True:
            with self._lock:
                if self._closed or self._places >= self._size:
                    return
                self._places += 1
            self.release(await self._made())

    def release(self, env: gym.Env, healthy: bool = True) -> None:
        """Take back ``env``: a healthy one waits for the next taker if the pool reuses envs; any other is
        discarded (out of the live set) and closed: in the background threads if the pool has them, its
        place free at once; else here, its place free once it is closed. A discarded env whose close fails
        is logged, not raised. An env the pool does not hold (closed by :meth:`close_all`) is left alone."""
        with self._lock:
            if env not in self._live:
                return
            if healthy and self._reuse:
                if env not in self._idle:  # given back twice: still one place in the queue, not two takers
                    self._idle.append(env)
                    self._wake()
                return
            del self._live[env]
            if env in self._idle:  # discarded without being taken
                self._idle.remove(env)
            if self._background is not None:
                self._places -= 1
                self._wake()
        if self._background is None:
            try:
                _close_discarded(env)
            finally:
                self._free_place()
            return
        try:
            closing = self._background.submit(_close_discarded, env)
        except RuntimeError:  # its threads stopped (the pool's owner is closing): closed here instead
            _close_discarded(env)
            return
        with self._lock:
            self._closing[closing] = env
        closing.add_done_callback(self._closed_in_background)

    def _closed_in_background(self, closing: Future[None]) -> None:
        if closing.cancelled():  # its threads stopped first: close_all closes it
            return
        with self._lock:
            self._closing.pop(closing, None)

    def close_all(self) -> None:
        """Close every env alive, and finish the closes of discarded ones; the pool gives out no env after
        this. Call it once the envs' steps have ended (a close under a running step would break it). Every
        env is closed even if one close fails; the first failure of a live env's close is raised then (a
        discarded env's is logged, wherever its close ran)."""
        with self._lock:
            self._closed = True
            envs, closing = list(self._live), dict(self._closing)
            self._live.clear()
            self._idle.clear()
            self._wake()
        for future, env in closing.items():
            if future.cancel():  # never started: its threads were shut down first
                _close_discarded(env)
            else:
                future.result()  # waits for it (_close_discarded logs a failure, never raises)
        failure: Exception | None = None
        for env in envs:
            try:
                env.close()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def _close_discarded(env: gym.Env) -> None:
    """Close an env the pool discarded; a failure is logged (nobody waits on this close to hear of it)."""
    try:
        env.close()
    except Exception:
        logger.exception("closing a discarded env (%r) failed", env)


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
