"""The command line a new user meets: every command's help is plain text that says what it does (no
reStructuredText, no module docstrings), and a ``--model`` that names a missing file or folder is refused at
once, naming it."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hopgym.cli import build_parser
from hopgym.commands.model_arguments import looks_like_path

MARKUP = re.compile(r"``|:(?:class|func|data|meth|mod|attr):`")


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_command_says_what_it_does_in_plain_text() -> None:
    parsers = dict(_parsers(build_parser(), "hopgym"))
    assert len(parsers) > 20  # every subcommand and action was walked
    for name, parser in parsers.items():
        text = parser.format_help()
        assert not MARKUP.findall(text), f"{name} --help shows reStructuredText: {MARKUP.findall(text)}"
        summary = parser.description or ""
        assert summary.strip(), f"{name} --help has no description of what the command does"
    top = build_parser().format_help()
    assert "dispatcher" not in top and "module" not in top
    for name in ("hopgym", "hopgym eval", "hopgym train grpo", "hopgym serve vllm"):  # the first commands run
        assert "example" in (parsers[name].description or "").lower(), f"{name} --help shows no example"


@pytest.mark.parametrize(
    ("model", "path_like"),
    [
        ("local", False),
        ("openai/gpt-4o", False),
        ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", False),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", False),
        ("./runs/sft", True),
        ("/models/x", True),
        ("~/models/x", True),
        ("model.gguf", True),
        ("runs/sft", True),  # runs/ is a folder in the test's working directory
    ],
)
def test_what_looks_like_a_path(model: str, path_like: bool, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert looks_like_path(model) is path_like


@pytest.mark.parametrize(
    "command",
    [
        ["train", "grpo", "--model", "runs/sft", "--out", "out"],
        ["train", "sft", "--model", "./missing-folder", "--out", "out"],
        ["eval", "--env", "ToolHop-v0", "--model", "runs/sft", "--out", "out"],
        ["construct", "--input", "rows.jsonl", "--model", "/nonexistent/model.gguf", "--out", "out.json"],
        ["ablate", "feedback", "--env", "ToolHop-v0", "--model", "~/no-such-model", "--out", "out"],
        ["serve", "vllm", "--model", "runs/sft"],
    ],
    ids=["train-grpo", "train-sft", "eval", "construct", "ablate", "serve-vllm"],
)
def test_a_missing_model_path_is_refused_at_once_naming_it(command: list[str], tmp_path: Path) -> None:
    """The README's GRPO command before its warm start: no hub retries, an error naming the folder."""
    (tmp_path / "runs").mkdir()  # as after `make demo` (runs/demo)
    missing = command[command.index("--model") + 1]
    if command[:2] == ["serve", "vllm"]:  # MODEL is positional there
        command.remove("--model")
    environment = {**os.environ, "HF_HUB_OFFLINE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "hopgym.cli", *command],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"no such file or folder: {missing!r}" in done.stderr
    assert "a folder hopgym wrote" in done.stderr and "'local'" in done.stderr
    assert "huggingface.co" not in done.stderr
    assert not (tmp_path / "out").exists()
