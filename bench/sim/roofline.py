"""The stated GPU cost model: a roofline over the real Qwen3 8B/14B/32B on H100 and H200.

Every constant below is stated and printed with each result. One step of
continuous batching runs some prefill chunks and some decode tokens; its time is

    step = overhead + max(FLOPs / (peak * flops_eff), bytes / (HBM * hbm_eff))
    FLOPs = 2 * body_params * tokens  +  2 * vocab * hidden * logit_rows
            + 4 * layers * heads * head_dim * attention_pairs
    bytes = weights + kv_bytes_per_token * KV tokens read

where a prefill chunk of m tokens at offset a has m*a + m(m+1)/2 attention
pairs (query, key) and a decode token at context c has c+1. Copies between
tiers move `kv_bytes_per_token` per token over PCIe (host) or from the store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench.sim.costmodel import StepLoad, TimedCosts
from penelope_engine.cache.tier import Tier
from penelope_engine.config import ModelConfig


def _qwen3(name: str, hidden: int, inter: int, layers: int, heads: int) -> ModelConfig:
    # Hugging Face Qwen/<name>/config.json; 131072 positions with YaRN (factor 4) as documented.
    return ModelConfig(
        arch="qwen3",
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=8,
        head_dim=128,
        max_position=131072,
        rope_theta=1e6,
        tie_word_embeddings=False,
        name=name,
    )


QWEN3: dict[str, ModelConfig] = {
    "qwen3-8b": _qwen3("Qwen3-8B", 4096, 12288, 36, 32),
    "qwen3-14b": _qwen3("Qwen3-14B", 5120, 17408, 40, 40),
    "qwen3-32b": _qwen3("Qwen3-32B", 5120, 25600, 64, 64),
}


@dataclass(frozen=True)
class Hardware:
    name: str
    bf16_flops: float  # dense peak, FLOP/s
    hbm_bytes: float  # GPU memory
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float  # one direction
    flops_eff: float = 0.55  # achieved share of peak in prefill-heavy steps
    hbm_eff: float = 0.75
    pcie_eff: float = 0.75
    step_overhead_s: float = 0.002  # scheduler + launch per batching step
    copy_latency_s: float = 20e-6  # per copy between tiers
    store_bytes_per_s: float = 5e9  # Arrow store on local NVMe
    store_latency_s: float = 1e-3

    def __post_init__(self) -> None:
        for f in ("flops_eff", "hbm_eff", "pcie_eff"):
            if not 0 < getattr(self, f) <= 1:
                raise ValueError(f"{f} must be in (0, 1], got {getattr(self, f)}")


HARDWARE: dict[str, Hardware] = {
    "h100": Hardware("H100 SXM5 80GB", 989e12, 80e9, 3.35e12, 64e9),
    "h200": Hardware("H200 SXM 141GB", 989e12, 141e9, 4.8e12, 64e9),
}


def param_count(m: ModelConfig) -> int:
    h, q, kv = m.hidden_size, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    attn = 2 * h * q + 2 * h * kv + (2 * m.head_dim if m.has_qk_norm else 0)
    layer = attn + 3 * h * m.intermediate_size + 2 * h
    embed = m.vocab_size * h * (1 if m.tie_word_embeddings else 2)
    return m.num_layers * layer + embed + h


class GpuCostModel(TimedCosts):
    def __init__(
        self, model: ModelConfig, hw: Hardware, dtype_bytes: int = 2, mem_fraction: float = 0.88
    ) -> None:
        if not 0 < mem_fraction <= 1:
            raise ValueError(f"mem_fraction must be in (0, 1], got {mem_fraction}")
        self.model, self.hw, self.dtype_bytes, self.mem_fraction = (
            model,
            hw,
            dtype_bytes,
            mem_fraction,
        )
        self.params = param_count(model)
        embed = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
        self.body_params = self.params - embed
        self.weight_bytes = self.params * dtype_bytes
        self.kv_bytes_per_token = model.kv_bytes_per_token(dtype_bytes)
        self._attn = 4 * model.num_layers * model.num_heads * model.head_dim
        self._flops = hw.bf16_flops * hw.flops_eff

    @property
    def num_layers(self) -> int:
        """The model's decoder layers: a copy streamed layer by layer lands in this many parts."""
        return self.model.num_layers

    def kv_capacity_tokens(self) -> int:
        """Tokens of KV that fit in `mem_fraction` of GPU memory after the weights."""
        free = self.hw.hbm_bytes * self.mem_fraction - self.weight_bytes
        return max(0, int(free // self.kv_bytes_per_token))

    def step_time(self, load: StepLoad) -> float:
        if load.sequences == 0:
            return 0.0
        flops = (
            2 * self.body_params * load.tokens
            + 2 * self.model.vocab_size * self.model.hidden_size * load.logit_rows
            + self._attn * load.attention_pairs
        )
        nbytes = self.weight_bytes + self.kv_bytes_per_token * load.kv_read_tokens
        return self.hw.step_overhead_s + np.maximum(
            flops / self._flops, nbytes / (self.hw.hbm_bytes_per_s * self.hw.hbm_eff)
        )

    def token_cost(self, position: int) -> float:
        """Prefill compute of one token at `position` (linear + attention over its keys)."""
        return (2 * self.body_params + self._attn * (position + 1)) / self._flops

    def attention_crossover(self) -> int:
        """Position where a token's attention FLOPs equal its linear FLOPs."""
        return round(2 * self.body_params / self._attn)

    def load_time(self, tokens: int, tier: Tier) -> float:
        nbytes = tokens * self.kv_bytes_per_token
        if tier == Tier.HOST:
            return self.hw.copy_latency_s + nbytes / (self.hw.pcie_bytes_per_s * self.hw.pcie_eff)
        if tier == Tier.STORE:
            return self.hw.store_latency_s + nbytes / self.hw.store_bytes_per_s
        raise ValueError(f"tier must be Tier.HOST or Tier.STORE, got {tier!r}")

    def describe(self) -> dict[str, Any]:
        m = self.model
        return {
            "kind": "gpu-roofline",
            "model": m.name,
            "layers": m.num_layers,
            "heads": m.num_heads,
            "kv_heads": m.num_kv_heads,
            "head_dim": m.head_dim,
            "hidden": m.hidden_size,
            "intermediate": m.intermediate_size,
            "params": self.params,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "dtype_bytes": self.dtype_bytes,
            "mem_fraction": self.mem_fraction,
            "kv_capacity_tokens": self.kv_capacity_tokens(),
            "attention_crossover_tokens": self.attention_crossover(),
            "hardware": asdict(self.hw),
        }
