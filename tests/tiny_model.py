"""The tiny model the training tests train: a 2-layer Llama with random weights and SmolLM2's tokenizer,
which trains, checkpoints and serves in seconds."""

from __future__ import annotations

from pathlib import Path


def save_tiny_model(folder: Path) -> Path:
    """Write the tiny model (seeded: the same weights every time) and its tokenizer to ``folder``."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from hopgym.train.model import model_source

    tokenizer = AutoTokenizer.from_pretrained(model_source("local"))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
