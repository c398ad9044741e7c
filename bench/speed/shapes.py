"""A real model's shape with random weights, drawn where it runs (the GPU benches).

Drawn on the device itself: `tiny.init_random` draws on the CPU, minutes for 8B
weights; these benches time copies and steps, never the tokens.
"""

from __future__ import annotations

import torch

from penelope_engine.config import DType, ModelConfig
from penelope_engine.model.registry import LoadedModel


def device_and_dtype() -> tuple[str, DType]:
    """CUDA in bfloat16 where there is one, else the CPU in float32."""
    return ("cuda", "bfloat16") if torch.cuda.is_available() else ("cpu", "float32")


def random_loaded(model: ModelConfig, device: str, dtype: DType, seed: int = 0) -> LoadedModel:
    """`model`'s decoder with seeded random weights on `device`, and Qwen3's tokenizer."""
    from penelope_engine.model.decoder import Decoder
    from penelope_engine.model.registry import qwen3_tokenizer

    torch.manual_seed(seed)
    decoder = Decoder(model, getattr(torch, dtype), device)
    with torch.no_grad():
        for p in decoder.parameters():
            p.uniform_(0.9, 1.1) if p.dim() == 1 else p.uniform_(-0.02, 0.02)
    return LoadedModel(model, decoder, qwen3_tokenizer())
