"""Rollouts on ``hopgym serve env`` servers: :class:`~hopgym.serving.rollouts.Rollouts`' episodes,
each played on one of several env servers through
:class:`~hopgym.serving.openenv_client.HopgymEnvClient`, so that a trainer's tool calls run on
other machines (``hopgym train grpo --env-url``, ``hopgym eval --env-url``).

An episode goes to the server with the fewest of this process's episodes in flight, a server that failed
being left out for a while (the model client's :class:`~hopgym.serving.endpoints.Endpoints`). A server's
sessions (one env on the server each) stay open between episodes, so an episode costs a ``reset``, not a new
env. A server that dies while it has an episode (its connection lost, or no answer within the client's
message timeout) or refuses one (no session: at capacity, a wrong key; or its ``reset`` fails) has that
episode played again from its start on another: the policy's actions so far are sent again and the policy is
asked only for the turns after them (``Rollouts.play``), and only the attempt that ended counts (its
reward, turns and calls; the cut-off ones are named in ``Rollout.cut_off``). An error frame mid-episode (an
action the env refused, a failure of the env) ends the episode with that error, as in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from websockets.exceptions import ConnectionClosed

from hopgym.errors import ActionError, ConfigError, EnvServerError, ModelError
from hopgym.serving.endpoints import Endpoints
from hopgym.serving.openenv_client import HopgymEnvClient
from hopgym.serving.openenv_types import HopgymAction, HopgymObservation
from hopgym.serving.rollouts import Policy, Rollout, Rollouts, RolloutsFactory, StepOutcome

ATTEMPTS_PER_SERVER = 2
"""Times an episode may be cut off per server before it ends with an error: a server restarted meanwhile
may have it again."""
COOLDOWN = 2.0
"""Seconds a server that failed is left out (doubling while it keeps failing, up to :data:`COOLDOWN_MAX`);
when every server is left out, an episode waits this long before trying the one back first."""
COOLDOWN_MAX = 30.0
URL_SCHEMES = ("http://", "https://", "ws://", "wss://")


def on_servers(env_urls: Sequence[str], api_key: str | None = None) -> RolloutsFactory:
    """The factory of rollouts on the servers at ``env_urls`` (``api_key``: theirs, when they have one), for a
    caller that makes its rollouts itself (``EvalConfig.make_rollouts``, ``hopgym.train.grpo.train``)."""
    return functools.partial(RemoteRollouts, env_urls=checked_urls(env_urls), api_key=api_key)


def checked_urls(env_urls: Sequence[str]) -> tuple[str, ...]:
    """``env_urls``, refused unless they are distinct server URLs (an episode would find out only later)."""
    bad = [url for url in env_urls if not isinstance(url, str) or not url.startswith(URL_SCHEMES)]
    if not env_urls or bad or len(set(env_urls)) != len(env_urls):
        raise ConfigError(
            f"--env-url must be distinct URLs of hopgym serve env servers ({', '.join(URL_SCHEMES)}), "
            f"got {list(env_urls)!r}"
        )
    return tuple(env_urls)


class ServerLost(EnvServerError):
    """The env server died or refused the episode: it is played again on another."""


def observation_of(observation: HopgymObservation) -> dict[str, Any]:
    """The gymnasium observation (``messages``, ``tools``) of a server's whole observation."""
    return {"messages": observation.messages, "tools": observation.tools}


class RemoteRollouts(Rollouts):
    """Episodes of ``env_id`` on the ``hopgym serve env`` servers at ``env_urls`` (serving ``env_id``; their
    kwargs are the operator's and must be ``env_kwargs``), up to ``concurrency`` at once. ``api_key``: the
    servers', when they have one. Envs made here (:meth:`make_env`) hold the tasks a caller reads (a
    trainer's dataset); no episode plays on them."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None,
        concurrency: int,
        env_urls: Sequence[str],
        api_key: str | None = None,
    ) -> None:
        self.env_urls = checked_urls(env_urls)
        super().__init__(env_id, env_kwargs, concurrency)
        self._api_key = api_key
        self._endpoints = Endpoints(self.env_urls, COOLDOWN, COOLDOWN_MAX)
        self._idle: dict[str, list[HopgymEnvClient]] = {url: [] for url in self.env_urls}
        self._open: set[HopgymEnvClient] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._places: asyncio.Semaphore | None = None
        self._first_env: gym.Env | None = None

    async def start(
        self, size: int | None = None, first_env: gym.Env | None = None, prefill: bool = True
    ) -> None:
        """Allow ``size`` episodes at once (default: ``concurrency``); ``first_env`` (the caller's, whose
        tasks it read) is closed with the rollouts. Sessions open as episodes ask for them."""
        self._first_env = first_env
        self._places = asyncio.Semaphore(size or self.concurrency)

    async def close(self) -> None:
        """Close every session (the servers close their envs) and ``first_env``; no episode runs after."""
        for session in list(self._open):
            self._discard(session)
        if self._closing:
            await asyncio.wait(self._closing)
        self._places = None
        await asyncio.get_running_loop().run_in_executor(None, self._close_first_env)

    def _close_first_env(self) -> None:
        self.shutdown()
        first, self._first_env = self._first_env, None
        if first is not None:
            first.close()

    @property
    def started(self) -> bool:
        return self._places is not None

    async def acquire(self) -> gym.Env:
        raise ConfigError("an episode driven by its caller needs an env in process, not an env server")

    async def episode(
        self, policy: Policy, options: Mapping[str, Any] | None = None, seed: int | None = None
    ) -> Rollout:
        """Play one episode to its end on a server (see the module docstring); any exception ends only this
        episode, as its ``error``, and so does every server failing it."""
        if self._places is None:
            raise RuntimeError("Rollouts.start() must come before episodes")
        rollout, actions = Rollout(), list[Any]()
        started = time.perf_counter()
        try:
            async with self._places:
                started = time.perf_counter()  # waiting for a place is not episode time
                await self._play_somewhere(policy, rollout, options, seed, actions)
        except Exception as exc:
            rollout.fail(exc)
        rollout.latency_ms = round((time.perf_counter() - started) * 1000, 1)
        return rollout

    async def _play_somewhere(
        self,
        policy: Policy,
        rollout: Rollout,
        options: Mapping[str, Any] | None,
        seed: int | None,
        actions: list[Any],
    ) -> None:
        attempts = ATTEMPTS_PER_SERVER * len(self.env_urls)
        for _ in range(attempts):
            if not self._endpoints.any_available():
                await asyncio.sleep(COOLDOWN)
            index = self._endpoints.acquire()
            url = self.env_urls[index]
            failed = False
            try:
                await self._play_on(url, policy, rollout, options, seed, actions)
                rollout.server = url
                return
            except ServerLost as exc:
                failed = True
                rollout.cut_off.append(f"{url}: {exc}")
                for session in list(self._idle[url]):  # opened before it failed: likely gone with it
                    self._discard(session)
            finally:
                self._endpoints.release(index, failed)
        raise EnvServerError(f"every env server failed the episode ({attempts} attempts): {rollout.cut_off}")

    async def _play_on(
        self,
        url: str,
        policy: Policy,
        rollout: Rollout,
        options: Mapping[str, Any] | None,
        seed: int | None,
        actions: list[Any],
    ) -> None:
        session = await self._session(url)
        healthy = False
        try:
            reset = functools.partial(self._reset, session)
            await self.play(
                reset, functools.partial(self._step, session), policy, rollout, options, seed, actions
            )
            healthy = True
        except (ModelError, ActionError):
            healthy = True  # the policy failed; the session is fine (its next reset starts afresh)
            raise
        finally:
            if healthy:
                self._idle[url].append(session)
            else:
                self._discard(session)

    async def _session(self, url: str) -> HopgymEnvClient:
        """An idle session of ``url``, else a new one, checked to serve this env id."""
        if self._idle[url]:
            return self._idle[url].pop()
        session = HopgymEnvClient(url, api_key=self._api_key)
        self._open.add(session)
        try:
            await session.connect()
            served = (await session.state()).env_id
        except (OSError, EnvServerError) as exc:
            self._discard(session)
            raise ServerLost(f"no session: {exc}") from exc
        except BaseException:
            self._discard(session)
            raise
        if served != self.env_id:
            self._discard(session)
            raise ConfigError(
                f"env server {url} serves {served}, not {self.env_id}: give the --env it serves"
            )
        return session

    def _discard(self, session: HopgymEnvClient) -> None:
        """Close ``session`` in the background (a close may wait for a hung server); :meth:`close` waits."""
        self._open.discard(session)
        for idle in self._idle.values():
            with contextlib.suppress(ValueError):
                idle.remove(session)
        closing = asyncio.ensure_future(self._close_quietly(session))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(session: HopgymEnvClient) -> None:
        with contextlib.suppress(Exception):  # a server that died has nothing left to close
            await session.close()

    @staticmethod
    async def _reset(
        session: HopgymEnvClient, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        data = {**(options or {}), **({} if seed is None else {"seed": seed})}
        try:
            result = await session.reset(**data)
        except (OSError, EnvServerError) as exc:
            raise ServerLost(f"reset failed: {exc}") from exc
        return observation_of(result.observation), result.observation.info

    @staticmethod
    async def _step(session: HopgymEnvClient, action: Any) -> StepOutcome:
        try:
            result = await session.step(HopgymAction.of(action))
        except OSError as exc:  # no answer within the message timeout
            raise ServerLost(f"step failed: {exc}") from exc
        except EnvServerError as exc:
            if isinstance(exc.__cause__, ConnectionClosed):
                raise ServerLost(f"step failed: {exc}") from exc
            raise
        observation = result.observation
        reward = float(result.reward or 0.0)
        return (
            observation_of(observation),
            reward,
            observation.terminated,
            observation.truncated,
            observation.info,
        )
