"""The prompts render exactly as pinned: the ToolHop protocol's parity and every paper-derived prompt
depend on their bytes (tests/prompt_cases.py lists the inputs; the fixture predates the YAML files)."""

from __future__ import annotations

import json

import pytest

from tests.prompt_cases import FIXTURE, rendered

PINNED = json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_every_pinned_prompt_is_rendered():
    assert sorted(rendered()) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_prompt_renders_byte_for_byte_as_pinned(name):
    assert rendered()[name] == PINNED[name]
