"""The ``process`` backend: pooled worker processes under bubblewrap or raw namespaces on this machine."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from hopgym.errors import ConfigError, IsolationUnavailableError
from hopgym.sandbox.cgroups import CgroupPlan, resolve_cgroups
from hopgym.sandbox.forkserver import ForkingLauncher
from hopgym.sandbox.isolation import IsolationPlan, resolve_isolation, worker_view
from hopgym.sandbox.launcher import ProcessLauncher
from hopgym.sandbox.limits import LimitOptions, SandboxLimits, cgroup_memory_bytes, check_policy
from hopgym.sandbox.pool import Launcher
from hopgym.sandbox.pooled import PooledSandbox

STARTS = ("auto", "spawn", "fork")
"""How each worker starts: a new interpreter under a new bwrap (``spawn``), or forked from a warm template
(``fork``, see :mod:`hopgym.sandbox.forkserver`; root only, bwrap or namespaces); ``auto``: ``fork`` where
it can work, else ``spawn``, saying why in a log record and in the report (``start_fallback``)."""
if TYPE_CHECKING:
    from typing_extensions import Unpack
_log = logging.getLogger(__name__)
_FALLBACKS_LOGGED: set[str] = set()


class ProcessSandbox(PooledSandbox):
    """Tool code in pooled worker processes; see :mod:`hopgym.sandbox.isolation` for the levels.

    ``isolation``: ``auto`` (bwrap, else raw namespaces), ``bwrap``, ``namespaces`` or ``none``;
    ``seccomp=False`` and ``isolation="none"`` are explicit requests for less. ``policy="restricted"`` adds
    RestrictedPython inside the worker. ``options``: the limits of :class:`LimitOptions` (``timeout``,
    ``memory_mb`` ...; defaults: :class:`SandboxLimits`').
    ``cgroup``: ``auto``, ``v2``, ``v1`` or ``none`` (rlimits only, explicitly); each worker's group allows
    ``max_tasks`` tasks and the memory of :func:`cgroup_memory_bytes` (see :mod:`hopgym.sandbox.cgroups`).
    ``start``: ``fork`` (forked from a warm template with the same isolation; see
    :mod:`hopgym.sandbox.forkserver`), ``spawn`` (a new interpreter per worker) or ``auto`` (``fork`` where
    it can work: root and isolation ``bwrap`` or ``namespaces``; else ``spawn``, logged and reported).
    Not thread-safe: use one sandbox per concurrently running episode.
    """

    def __init__(
        self,
        isolation: str = "auto",
        seccomp: bool = True,
        policy: str | None = None,
        spares: int = 1,
        cgroup: str = "auto",
        max_tasks: int = 64,
        start: str = "auto",
        **options: Unpack[LimitOptions],
    ) -> None:
        check_policy(policy)
        limits = SandboxLimits.of(max_tasks=max_tasks, **options)
        plan = resolve_isolation(isolation, seccomp)
        start, fallback = _resolve_start(start, plan)
        cgroups = resolve_cgroups(cgroup, limits.max_tasks, cgroup_memory_bytes(limits))
        described = "+".join(filter(None, [plan.describe(), cgroups.describe()]))
        described += "+restricted" if policy else ""
        self._report = {
            "level": plan.level,
            "seccomp": plan.seccomp,
            "policy": policy,
            "rlimits": limits.rlimits(),
            "cgroup": cgroups.report(),
            "view": worker_view(policy).report() if plan.level != "none" else "the host's files",
            "paused_between_calls": True,
            "start": start,
            **({"start_fallback": fallback} if fallback else {}),
        }
        launcher = _launcher(start, plan, limits, policy, cgroups)
        self._launcher = launcher
        self._isolates_files = plan.isolates_files
        try:
            super().__init__(launcher, described, spares=spares, limits=limits)
        except BaseException:
            launcher.close()
            raise

    @property
    def report(self) -> dict[str, Any]:
        """What is in force, in detail: level, seccomp, rlimits, the cgroup's limits, the mounted view."""
        return dict(self._report)

    @property
    def isolates_files(self) -> bool:
        return self._isolates_files

    def close(self) -> None:
        super().close()
        self._launcher.close()


def _resolve_start(start: str, plan: IsolationPlan) -> tuple[str, str | None]:
    """The start mode in force and, when ``auto`` falls back to ``spawn``, why (also logged)."""
    if start not in STARTS:
        raise ConfigError(f"start={start!r} is not a start mode; valid: {', '.join(STARTS)}")
    problem = _fork_problem(plan)
    if start == "fork" and problem:
        raise IsolationUnavailableError(
            f"start='fork' needs {problem}: the template gives each worker its own namespaces; "
            "or pass start='spawn'"
        )
    if start != "auto":
        return start, None
    if problem:
        reason = f"start='fork' needs {problem}"
        if reason not in _FALLBACKS_LOGGED:  # once per process: a vector env starts many sandboxes
            _FALLBACKS_LOGGED.add(reason)
            _log.warning("sandbox workers start as new interpreters (start='spawn'): %s", reason)
        return "spawn", reason
    return "fork", None


def _fork_problem(plan: IsolationPlan) -> str | None:
    """What keeps ``start="fork"`` from working here, or None."""
    if plan.level == "none" or os.geteuid() != 0:
        return f"root and isolation 'bwrap' or 'namespaces' (got {plan.level!r}, uid {os.geteuid()})"
    return None


def _launcher(
    start: str, plan: IsolationPlan, limits: SandboxLimits, policy: str | None, cgroups: CgroupPlan
) -> Launcher:
    if start == "fork":
        return ForkingLauncher(plan, limits, policy, cgroups)
    return ProcessLauncher(plan, limits, policy, cgroups)
