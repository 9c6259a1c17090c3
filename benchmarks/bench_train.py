"""GRPO step time split into generation, env (sandboxed turns) and the rest (forward, backward, optimizer).

Runs ``hopgym train grpo``'s trainer for a few steps (or reads the ``steps.jsonl`` of a run already made,
``--from-log``) and reports, per step after the first (which pays for warm-up), the median seconds of the
step, of generation (the trainer's ``generate`` calls inside the rollout), of the env (``reset`` and
``step`` of every episode: validation, sandboxed calls, scoring) and of the rest, and the env's share of
the step. Needs the ``train`` extra. Run from the repo root:

    HOPGYM_DATA=../shared/data .venv/bin/python benchmarks/bench_train.py [--steps 4] [--out F]
    .venv/bin/python benchmarks/bench_train.py --from-log runs/train/steps.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _timing import report

ENV_KWARGS = {"kg": "family-e", "patterns": "1p", "n": 20, "n_distractors": 0, "max_turns": 2}


def figures_of(steps: list[dict]) -> dict:
    """Median seconds per part over the steps after the first, and the env's share of a step."""
    timed = steps[1:] if len(steps) > 1 else steps
    parts = {part: statistics.median(step["seconds"][part] for step in timed) for part in timed[0]["seconds"]}
    env_share = statistics.median(step["seconds"]["env"] / step["seconds"]["step"] for step in timed)
    episodes = statistics.median(len(step["episodes"]) for step in timed)
    calls = statistics.median(sum(step["statuses"].values()) for step in timed)
    return {
        "steps_timed": len(timed),
        "episodes_per_step": episodes,
        "calls_per_step": calls,
        **{f"{part}_s_median": round(value, 3) for part, value in parts.items()},
        "env_share_of_step": round(env_share, 5),
        "steps_per_min": round(60 / parts["step"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-log", type=Path, help="a run's steps.jsonl to read instead of training")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps to run (the first is not timed)")
    parser.add_argument("--model", default="local", help="as hopgym train grpo --model (default: local)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--out", help="also write the JSON figures to this file")
    args = parser.parse_args(argv)

    if args.from_log is not None:
        from hopgym.train.steplog import read_steps

        steps = read_steps(args.from_log)
    else:
        import hopgym  # noqa: F401 - registers the envs
        from hopgym.train.config import TrainConfig
        from hopgym.train.grpo import train
        from hopgym.train.steplog import STEP_LOG, read_steps

        with tempfile.TemporaryDirectory() as folder:
            config = TrainConfig(
                out=Path(folder) / "run",
                env_kwargs=ENV_KWARGS,
                model=args.model,
                num_generations=4,
                tasks_per_step=1,
                max_completion_length=48,
                max_steps=args.steps,
                save_steps=args.steps,
                threads=args.threads,
                progress=False,
            )
            train(config)
            steps = read_steps(config.out / STEP_LOG)
    figures = figures_of(steps)
    report(figures, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
