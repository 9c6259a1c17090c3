"""KG data layer benchmark: FB15k-237 load time and peak RSS, FOL tasks sampled per second per pattern.

Targets (issue 6): load <= 5 s and <= 500 MB RSS for all 310k triples; sampling 200 tasks per pattern in
seconds. Run from the repo root:

    HOPGYM_DATA=/work/shared/data .venv/bin/python benchmarks/bench_kg.py [--n 200] [--seed 0] [--out F]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from hopgym.tasks.fol.queries import PATTERN_NAMES
from hopgym.tasks.fol.sampler import sample_queries
from hopgym.tasks.kg.fb15k237 import load_fb15k237

LOAD_SECONDS_TARGET = 5.0
RSS_MB_TARGET = 500.0


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="fb15k-237 folder (default: $HOPGYM_DATA/fb15k-237)")
    parser.add_argument("--n", type=int, default=200, help="tasks sampled per pattern")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    rss_before = peak_rss_mb()
    start = time.perf_counter()
    fb = load_fb15k237(args.data)
    load_seconds = time.perf_counter() - start
    rss_after = peak_rss_mb()
    kg = fb.kg
    print(f"FB15k-237: {len(kg):,} triples, {len(kg.entities()):,} entities, {len(kg.relations())} relations")
    print(f"load: {load_seconds:.2f} s (target <= {LOAD_SECONDS_TARGET:.0f} s)")
    print(
        f"peak RSS: {rss_after:.0f} MB for the whole process (target <= {RSS_MB_TARGET:.0f} MB), "
        f"{rss_after - rss_before:.0f} MB of it for the graph"
    )

    rates = {}
    print(f"\n{'pattern':<8}{'tasks':>7}{'seconds':>10}{'tasks/s':>10}")
    for pattern in PATTERN_NAMES:
        start = time.perf_counter()
        samples = sample_queries(fb.kg, pattern, args.n, seed=args.seed)
        seconds = time.perf_counter() - start
        rates[pattern] = {
            "tasks": len(samples),
            "seconds": round(seconds, 3),
            "tasks_per_s": len(samples) / seconds,
        }
        print(f"{pattern:<8}{len(samples):>7}{seconds:>10.2f}{len(samples) / seconds:>10.0f}")
    total = sum(r["seconds"] for r in rates.values())
    print(f"{'all':<8}{args.n * len(PATTERN_NAMES):>7}{total:>10.2f}")

    if args.out:
        figures = {
            "load_seconds": round(load_seconds, 3),
            "peak_rss_mb": round(rss_after, 1),
            "graph_rss_mb": round(rss_after - rss_before, 1),
            "sampling": rates,
        }
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return 0 if load_seconds <= LOAD_SECONDS_TARGET and rss_after <= RSS_MB_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
