"""The one env pool (``hopgym.serving.env_pool``) on real ToolHop envs: its cap holds when threads race for
it, a failed make or a broken env frees its place, a discarded env is closed and replaced, close-all closes
what is alive, and a full pool either makes its taker wait (rollouts) or refuses at once (a server)."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

from hopgym.errors import DataError, EnvServerError, HopgymError
from hopgym.serving.env_pool import EnvPool
from hopgym.serving.rollouts import make_env

make_toolhop = functools.partial(make_env, "ToolHop-v0")
make_without_data = functools.partial(make_env, "ToolHop-v0", {"data_path": "/nonexistent/ToolHop.json"})


def works(env: gym.Env) -> bool:
    """The env plays: a reset and one tool call."""
    observation, _ = env.reset(options={"index": 0})
    name = observation["tools"][0]["function"]["name"]
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": "{}"}}
    _, _, _, _, info = env.step({"role": "assistant", "content": None, "tool_calls": [call]})
    return info["calls"][0]["status"] in {"ok", "parameter_missing"}


def closed(env: gym.Env) -> bool:
    try:
        env.reset(options={"index": 0})
    except HopgymError as exc:
        return "closed" in str(exc)
    return False


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4, thread_name_prefix="test-env-pool") as executor:
        yield executor


def test_the_cap_holds_when_threads_open_at_once_and_a_full_pool_refuses_naming_its_option() -> None:
    pool = EnvPool(make_toolhop, 2, reuse=False, cap_name="--max-sessions")
    start = threading.Barrier(8)
    opened: list[gym.Env] = []
    refused: list[EnvServerError] = []

    def session() -> None:
        start.wait()
        try:
            opened.append(pool.open())
        except EnvServerError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=session) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 2 and len(refused) == 6 and sorted(map(id, pool.envs)) == sorted(map(id, opened))
    assert all(
        "at capacity" in str(exc) and "2 envs" in str(exc) and "--max-sessions" in str(exc) for exc in refused
    )
    pool.release(opened[0])  # a pool that does not reuse closes a session's env, and its place is free
    assert closed(opened[0]) and pool.envs == [opened[1]]
    again = pool.open()
    assert again is not opened[0] and works(again) and works(opened[1])
    with pytest.raises(EnvServerError, match="at capacity"):
        pool.open()
    pool.close_all()


def test_a_size_that_is_not_a_positive_integer_is_refused_by_its_name() -> None:
    for size in (0, -1, 2.5, "4"):
        with pytest.raises(HopgymError, match=rf"--max-sessions must be a positive integer, got {size!r}"):
            EnvPool(make_toolhop, size, cap_name="--max-sessions")  # type: ignore[arg-type]


def test_a_failed_make_frees_its_place_for_the_next_taker_and_a_waiting_one() -> None:
    pool = EnvPool(make_without_data, 1)
    for _ in range(3):  # the place comes back after each failure: the pool never fills with nothing
        with pytest.raises(DataError, match=r"/nonexistent/ToolHop\.json"):
            pool.open()
    assert pool.envs == []

    making, fail = threading.Event(), threading.Event()
    makes = iter([make_without_data, make_toolhop])

    def make_slowly_then_fail_once() -> gym.Env:
        make = next(makes)
        if make is make_without_data:
            making.set()
            fail.wait(30)
        return make()

    async def scenario() -> gym.Env:
        with ThreadPoolExecutor(2) as executor:
            waiting = EnvPool(make_slowly_then_fail_once, 1, background=executor)
            first = asyncio.ensure_future(waiting.acquire())  # takes the one place; its make will fail
            await asyncio.to_thread(making.wait, 30)
            second = asyncio.ensure_future(waiting.acquire())
            await asyncio.sleep(0)
            assert not second.done()  # the place is taken: it waits
            fail.set()
            with pytest.raises(DataError):
                await first
            env = await second  # woken by the freed place, it made a working env
            assert waiting.envs == [env] and works(env)
            waiting.close_all()
            return env

    assert closed(asyncio.run(scenario()))


def test_a_full_pool_makes_an_acquire_wait_and_a_release_from_another_thread_wakes_it(background) -> None:
    async def scenario() -> None:
        pool = EnvPool(make_toolhop, 1, background=background)
        env = await pool.acquire()
        with pytest.raises(EnvServerError, match=r"at capacity: all 1 envs are in use \(size\)"):
            pool.open()  # the other policy on the same pool: refuse at once
        waiter = asyncio.ensure_future(pool.acquire())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiter.done()
        await asyncio.to_thread(pool.release, env)  # a healthy env goes back from a thread: reused
        assert await asyncio.wait_for(waiter, 60) is env and pool.envs == [env] and works(env)
        pool.close_all()

    asyncio.run(scenario())


def test_an_unhealthy_env_is_closed_and_replaced_and_a_waiter_gets_the_new_one(background) -> None:
    async def scenario() -> tuple[gym.Env, gym.Env]:
        pool = EnvPool(make_toolhop, 1, background=background)
        broken = await pool.acquire()
        waiter = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        pool.release(broken, healthy=False)  # its place is free at once; its close runs in the background
        assert broken not in pool.envs
        new = await asyncio.wait_for(waiter, 60)
        assert new is not broken and pool.envs == [new] and works(new)
        pool.release(new)
        assert await pool.acquire() is new  # a healthy env is reused
        pool.close_all()  # waits for the broken env's close too
        return broken, new

    broken, new = asyncio.run(scenario())
    assert closed(broken) and closed(new)


def test_a_waiting_acquire_cancelled_before_its_make_starts_frees_its_place() -> None:
    blocker = threading.Event()

    async def scenario() -> gym.Env:
        with ThreadPoolExecutor(1) as executor:
            executor.submit(blocker.wait, 30)  # the only background thread is busy: the make is queued
            pool = EnvPool(make_toolhop, 1, background=executor)
            taker = asyncio.ensure_future(pool.acquire())
            await asyncio.sleep(0)
            taker.cancel()
            await asyncio.gather(taker, return_exceptions=True)
            blocker.set()
            env = pool.open()  # the place the cancelled make held is free
            assert pool.envs == [env] and works(env)
            pool.close_all()
            return env

    assert closed(asyncio.run(scenario()))


class FailingClose(gym.Wrapper):
    """A real env whose close closes it and then fails (a sandbox that dies badly)."""

    def close(self) -> None:
        super().close()
        raise OSError("close failed after the env was closed")


def test_close_all_closes_every_live_env_even_past_a_failing_close_and_gives_no_more(background) -> None:
    async def scenario() -> list[gym.Env]:
        pool = EnvPool(make_toolhop, 3, envs=[FailingClose(make_toolhop())], background=background)
        await pool.fill()
        held = await pool.acquire()  # one taken, the others idle: close_all closes them all
        envs = pool.envs
        assert len(envs) == 3 and held in envs
        with pytest.raises(OSError, match="close failed"):
            pool.close_all()
        with pytest.raises(EnvServerError, match="closed"):
            await pool.acquire()
        with pytest.raises(EnvServerError, match="closed"):
            pool.open()
        pool.release(held)  # a late give-back is left alone
        assert pool.envs == []
        return envs

    assert all(closed(env) for env in asyncio.run(scenario()))
    assert works(make_toolhop())  # nothing of the closed pool is left in the way


def test_a_discarded_env_whose_close_fails_in_the_background_is_logged_and_the_pool_goes_on(
    background, caplog
) -> None:
    async def scenario() -> gym.Env:
        pool = EnvPool(make_toolhop, 1, envs=[FailingClose(make_toolhop())], background=background)
        broken = await pool.acquire()
        with caplog.at_level(logging.ERROR, logger="hopgym.serving.env_pool"):
            pool.release(broken, healthy=False)
            new = await pool.acquire()
            assert new is not broken and works(new)
            pool.close_all()  # waits for the failed close
        return broken

    broken = asyncio.run(scenario())
    assert closed(broken)
    assert any("closing a discarded env" in r.message and r.exc_info for r in caplog.records), caplog.records


def test_a_discarded_env_whose_close_never_started_is_closed_by_close_all() -> None:
    """Rollouts stop their threads (dropping queued work) before closing the pool: a discarded env whose
    close was still queued then is closed by close_all, not lost."""
    blocker = threading.Event()
    executor = ThreadPoolExecutor(1)
    try:
        pool = EnvPool(make_toolhop, 1, envs=[make_toolhop()], background=executor)
        executor.submit(blocker.wait, 30)  # the only background thread is busy: the close is queued
        broken = pool.envs[0]
        pool.release(broken, healthy=False)
        executor.shutdown(wait=False, cancel_futures=True)
        assert not closed(broken)  # its close never ran
    finally:
        blocker.set()
        executor.shutdown(wait=True)
    pool.close_all()
    assert closed(broken)


class HeldClose(gym.Wrapper):
    """A real env whose close waits until the test lets it go on (a sandbox slow to stop)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.closing, self.go_on = threading.Event(), threading.Event()

    def close(self) -> None:
        self.closing.set()
        assert self.go_on.wait(60), "the test never let the close go on"
        super().close()


def test_without_background_threads_a_place_comes_back_only_once_its_env_is_closed() -> None:
    """A server's cap bounds every env that exists, those still closing included (their processes and open
    files): a session past the cap is refused while a closed session's env is still closing."""
    held = HeldClose(make_toolhop())
    pool = EnvPool(lambda: held, 1, reuse=False, cap_name="--max-sessions")
    env = pool.open()
    closing = threading.Thread(target=pool.release, args=(env,))
    closing.start()
    try:
        assert held.closing.wait(60)
        with pytest.raises(EnvServerError, match="at capacity"):
            pool.open()
    finally:
        held.go_on.set()
        closing.join(60)
    assert closed(held)
    fresh = EnvPool(make_toolhop, 1, reuse=False)
    assert works(fresh.open())  # the place is back: a new env can be opened at once
    fresh.close_all()


def test_after_its_background_threads_stopped_a_broken_env_is_closed_where_it_is_given_back() -> None:
    executor = ThreadPoolExecutor(1)
    pool = EnvPool(make_toolhop, 1, envs=[make_toolhop()], background=executor)
    broken = pool.open()  # the idle env, taken
    executor.shutdown(wait=True)
    pool.release(broken, healthy=False)  # no thread to close it in: closed here, not lost
    assert closed(broken) and pool.envs == []

    async def taken() -> gym.Env:
        return await pool.acquire()

    with pytest.raises(EnvServerError, match="closed"):  # no thread to make one in either
        asyncio.run(taken())
    env = pool.open()  # the refused make gave its place back
    assert works(env)
    pool.close_all()


def test_an_env_given_back_twice_goes_to_one_taker_and_an_idle_one_discarded_is_never_lent() -> None:
    pool = EnvPool(make_toolhop, 2, envs=[make_toolhop()])
    env = pool.open()
    pool.release(env)
    pool.release(env)  # twice, by mistake
    first, second = pool.open(), pool.open()
    assert first is env and second is not env
    pool.release(first)
    pool.release(first, healthy=False)  # idle, then discarded: closed and out of the queue
    assert closed(first) and pool.envs == [second]
    third = pool.open()
    assert third is not first and works(third)
    pool.close_all()
