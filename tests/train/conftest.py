"""Fixtures the training tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_model import save_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with random weights and SmolLM2's tokenizer: trains and checkpoints in seconds (torch
    is imported when a test asks for it, not while the workers collect)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))
