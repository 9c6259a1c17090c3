"""Memory per idle session of ``hopgym serve env``, against openenv's own no-op MCP environment.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_serve_memory.py [--sessions 64,256]
[--idle 3] [--rounds 1]`` (needs ``hopgym[serve]``). For each number N of sessions, a fresh server: its whole
process tree (the server and every sandbox worker, bwrap and fork-server below it) measured empty, then with N
``HopgymEnvClient`` sessions each reset and left idle for ``--idle`` seconds, then again once they are
closed. Memory is PSS from ``/proc/PID/smaps_rollup``: a page shared by k processes counts 1/k in each, so
the pages the forked workers share are not counted N times. Prints one JSON object: per server (``server``:
hopgym's, ``noop_server``: the same app over openenv's ``MCPEnvironment`` doing nothing, what openenv itself
keeps per session) and N, the tree's PSS and process count empty / with N idle sessions / after they closed,
and ``per_session_mb``: (with N - empty) / N, split into the server process's share and its descendants'.
With ``--rounds R`` the same server takes R waves of N sessions one after another, and
``closed_pss_mb_by_round`` is its tree's PSS after each wave closed: a leak grows it wave by wave, memory
the allocator merely keeps for reuse does not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import report
from bench_env import descendants
from bench_serve import hopgym_server, noop_server, serve, stop

from hopgym.serving.openenv_client import HopgymEnvClient

MB = 1024.0
"""smaps_rollup counts in kB."""


def pss_kb(pid: int) -> int:
    """The process's proportional set size (0 once it has exited)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return sum(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))


def tree(pid: int) -> dict[str, Any]:
    """PSS of ``pid`` and of everything under it, in MB, how many processes that is, and the server
    process's own open files and threads (what a session costs besides memory)."""
    below = descendants(pid)
    own, rest = pss_kb(pid), sum(pss_kb(child) for child in below)
    return {
        "pss_mb": round((own + rest) / MB, 1),
        "server_process_mb": round(own / MB, 1),
        "descendants_mb": round(rest / MB, 1),
        "processes": 1 + len(below),
        "server_fds": len(os.listdir(f"/proc/{pid}/fd")),
        "server_threads": len(os.listdir(f"/proc/{pid}/task")),
    }


async def with_idle_sessions(url: str, pid: int, sessions: int, idle: float) -> dict[str, Any]:
    """Open ``sessions`` sessions, reset each (its env and sandbox made), and measure the tree once all have
    been idle for ``idle`` seconds; then close them and measure again after as long."""
    clients = [HopgymEnvClient(url) for _ in range(sessions)]
    try:
        await asyncio.gather(*(client.connect() for client in clients))
        await asyncio.gather(*(client.reset(index=i % 100) for i, client in enumerate(clients)))
        await asyncio.sleep(idle)
        loaded = tree(pid)
    finally:
        await asyncio.gather(*(client.close() for client in clients))
    await asyncio.sleep(idle)
    return {"idle": loaded, "closed": tree(pid)}


def measure(command: list[str], sessions: int, idle: float, rounds: int = 1) -> dict[str, Any]:
    """One fresh server: its tree empty, with ``sessions`` idle sessions and after they closed, for each of
    ``rounds`` waves of sessions (the figures of the first; the closed PSS of each)."""
    server, url = serve(command)
    try:
        asyncio.run(asyncio.sleep(idle))
        empty = tree(server.pid)
        waves = [asyncio.run(with_idle_sessions(url, server.pid, sessions, idle)) for _ in range(rounds)]
        out = {"empty": empty, **waves[0]}
        out["closed_pss_mb_by_round"] = [wave["closed"]["pss_mb"] for wave in waves]
    finally:
        stop(server)
    loaded = out["idle"]
    out["per_session_mb"] = {
        key: round((loaded[key] - empty[key]) / sessions, 2)
        for key in ("pss_mb", "server_process_mb", "descendants_mb")
    }
    for key in ("processes", "server_fds", "server_threads"):
        out[f"{key}_per_session"] = round((loaded[key] - empty[key]) / sessions, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="64,256", help="comma list of idle sessions to hold at once")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to let the server settle")
    parser.add_argument("--rounds", type=int, default=1, help="waves of sessions one server takes in turn")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    levels = [int(level) for level in args.sessions.split(",")]
    servers = {"server": hopgym_server, "noop_server": noop_server}
    result: dict[str, Any] = {"idle_s": args.idle}
    for name, command in servers.items():
        result[name] = {level: measure(command(level, 1), level, args.idle, args.rounds) for level in levels}
    report(result, args.out)


if __name__ == "__main__":
    main()
