"""Run every benchmark in one go (what ``make bench`` does) and keep their figures together.

Each ``bench_*.py`` beside this file is run in its own process with ``--out`` so one measurement cannot
skew the next (peak RSS in particular); the figures land in ``benchmarks/results/latest.json``. The Docker
benchmark needs a reachable engine and the sandbox image: without them it is reported as skipped, with
the reason, rather than left out silently.

Usage: ``HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/run.py [--only sandbox,env]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
BENCHMARKS = (
    "sandbox",
    "env",
    "kg",
    "kgtool",
    "kgetool",
    "runner",
    "local_model",
    "checkpoint",
    "ray",
    "docker",
    "serve",
    "serve_memory",
    "train",
)


def docker_ready() -> str | None:
    """None when the Docker benchmark can run, else why not."""
    from hopgym.errors import HopgymError

    try:
        from hopgym.sandbox.docker.engine import DEFAULT_IMAGE, connect_engine, require_image

        require_image(connect_engine(), DEFAULT_IMAGE)
    except (HopgymError, ImportError) as exc:
        return str(exc)
    return None


def run_one(name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{name}.json"
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(HERE / f"bench_{name}.py"), "--out", str(out)], check=False
        )
        seconds = round(time.perf_counter() - started, 1)
        if proc.returncode != 0 or not out.exists():
            return {"status": "failed", "exit_code": proc.returncode, "seconds": seconds}
        return {"status": "ok", "seconds": seconds, "figures": json.loads(out.read_text(encoding="utf-8"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma list of: {', '.join(BENCHMARKS)}"
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; valid: {', '.join(BENCHMARKS)}")

    results: dict[str, dict] = {}
    for name in chosen:
        reason = docker_ready() if name == "docker" else None
        if reason is not None:
            results[name] = {"status": "skipped", "reason": reason}
        else:
            print(f"\n=== bench_{name}.py", flush=True)
            results[name] = run_one(name)
        print(f"--- {name}: {results[name]['status']}", flush=True)

    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nfigures written to {RESULTS.relative_to(HERE.parent)}")
    return 1 if any(result["status"] == "failed" for result in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
