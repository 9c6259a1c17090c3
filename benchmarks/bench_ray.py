"""The ray executor's cost: dispatch overhead per episode (ray vs local), zero-latency throughput on one and
two nodes.

Run: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_ray.py [--episodes N] [--concurrency K]
[--repeats R]`` (needs ``hopgym[ray]``). Prints one JSON object: each figure the median of R runs, the
local and ray ones interleaved (this machine's load moves them), with every run's value under ``runs``.

Episodes are bench_runner's two-turn fc episodes (one real sandboxed tool call, then an answer) against a
zero-latency scripted server in its own process, on a Ray cluster started here (loopback, one CPU per node).

Figures are steady-state: from the first record written to the last (``start_s`` is the time to the
first record). ``cold_start_s``: the first run on a node also starts its actor, which imports hopgym and
litellm (seconds); later runs of the same driver reuse it and only fill its sandbox pool.

* ``dispatch``: one episode at a time (``--concurrency 1``, one node); the overhead per episode is the wall
  time between records minus the episode's own time (``latency_ms``, measured where it ran): for the local
  executor the runner's own bookkeeping, for ray also the actor call and the record's trip back.
* ``throughput``: ``--concurrency`` episodes at once per node, episodes per second with the local executor,
  ray on one node, ray on two nodes. Both nodes share this machine's two cores, so the second node adds
  processes, not CPU: on separate machines a sandbox-bound run grows with the nodes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_runner import _serve, scripted_eval_config

from hopgym.agents.evaluation.records import read_episodes
from hopgym.agents.evaluation.runner import EvalRun

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.ray_cluster import local_cluster  # the repository root is importable from here on


def measure(api_base: str, episodes: int, concurrency: int, executor: str, address: str | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        config = scripted_eval_config(
            Path(folder) / "run", api_base, episodes, concurrency, executor=executor, ray_address=address
        )
        run = EvalRun(config)  # made outside the clock: importing a client takes seconds
        watch = RecordClock(config.out / "episodes.jsonl")
        started = time.perf_counter()
        watch.start()
        run.run()
        watch.join()
        records = read_episodes(config.out / "episodes.jsonl")
    first, last = watch.first - started, watch.last - started
    wall = (last - first) / (len(records) - 1)  # per episode, between the first record and the last
    episode_ms = statistics.fmean(record.latency_ms for record in records[1:])  # those after the first
    figures = {
        "executor": executor,
        "episodes": len(records),
        "errors": sum(record.error is not None for record in records),
        "nodes": len({record.node for record in records}),
        "concurrency_per_node": concurrency,
        "start_s": round(first, 2),
        "total_s": round(last, 2),
        "episodes_per_s": round(1 / wall, 2),
        "episode_mean_ms": round(episode_ms, 1),
    }
    if concurrency == 1:  # one at a time: the gap between records is the episode plus its dispatch
        figures["overhead_per_episode_ms"] = round(1000 * wall - episode_ms, 1)
    return figures


class RecordClock(threading.Thread):
    """Notes when the first and the last record of an episodes file appear (polled every 2 ms)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.first = self.last = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        size = 0
        while not self.done.is_set():
            now = time.perf_counter()
            current = self.path.stat().st_size if self.path.exists() else 0
            if current != size:
                size = current
                self.first = self.first or now
                self.last = now
            time.sleep(0.002)

    def join(self, timeout: float | None = None) -> None:
        self.done.set()
        super().join(timeout)


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over repeated runs, and every run's value beside it."""
    keys = [key for key in runs[0] if isinstance(runs[0][key], float)]
    summary = {key: round(statistics.median(run[key] for run in runs), 2) for key in keys}
    return {**runs[0], **summary, "runs": {key: [run[key] for run in runs] for key in keys}}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement, interleaved")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args()
    context = multiprocessing.get_context("fork")
    address, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(0.0, 0.0, address, stop), daemon=True)
    server.start()
    dispatch_episodes = max(10, args.episodes // 4)
    runs: dict[str, list[dict[str, Any]]] = {}

    def take(name: str, episodes: int, concurrency: int, executor: str, address: str | None) -> None:
        runs.setdefault(name, []).append(measure(api_base, episodes, concurrency, executor, address))

    try:
        api_base = address.get(timeout=30)
        with local_cluster(nodes=1) as cluster:
            first = measure(api_base, dispatch_episodes, 1, "ray", cluster.address)  # starts the actor
            cold_start = {"ray_one_node": first["start_s"]}
            for _ in range(args.repeats):
                take("dispatch_local", dispatch_episodes, 1, "local", None)
                take("dispatch_ray", dispatch_episodes, 1, "ray", cluster.address)
                take("throughput_local", args.episodes, args.concurrency, "local", None)
                take("throughput_ray_one_node", args.episodes, args.concurrency, "ray", cluster.address)
            cluster.add_second_node()
            first = measure(api_base, args.episodes, args.concurrency, "ray", cluster.address)
            cold_start["ray_second_node"] = first["start_s"]
            for _ in range(args.repeats):
                take("throughput_local_again", args.episodes, args.concurrency, "local", None)
                take("throughput_ray_two_nodes", args.episodes, args.concurrency, "ray", cluster.address)
    finally:
        stop.set()
        server.join(timeout=10)
    report: dict[str, Any] = {name: medians(measured) for name, measured in runs.items()}
    report["cold_start_s"] = cold_start
    overheads = [report[name]["overhead_per_episode_ms"] for name in ("dispatch_ray", "dispatch_local")]
    report["ray_dispatch_overhead_per_episode_ms"] = round(overheads[0] - overheads[1], 1)
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
