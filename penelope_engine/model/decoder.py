"""Paged-KV decoder for the Llama and Qwen3 architectures.

Parameter names follow Hugging Face (`model.layers.0.self_attn.q_proj.weight`,
...), so checkpoints load without renaming. One forward runs a flat batch of
T query tokens from any number of sequences, described by one explicit
`AttentionMetadata`; linear layers run on all T rows at once, and each layer
writes this step's K/V into the pool before it attends (see
`paged_attention`). The modules keep no per-forward state.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import torch
from torch import nn

from penelope_engine.config import ModelConfig, Weights
from penelope_engine.model import cpu_kernels
from penelope_engine.model.attention import AttentionMetadata
from penelope_engine.model.gemm import PackedLinear
from penelope_engine.model.layers import MLP, Embedding, Gemm, Linear, RMSNorm, fuse_rows
from penelope_engine.model.paged_attention import AttentionPlan, paged_attention
from penelope_engine.model.rope import RotaryCache, apply_rope
from penelope_engine.model.weight_formats import WEIGHT_FORMATS, QuantizedLinear, vectorized
from penelope_engine.tiers.kv_pool import KVPool

log = logging.getLogger(__name__)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        self.q_proj = Linear(cfg.hidden_size, q_size, **factory)
        self.k_proj = Linear(cfg.hidden_size, kv_size, **factory)
        self.v_proj = Linear(cfg.hidden_size, kv_size, **factory)
        self.o_proj = Linear(q_size, cfg.hidden_size, **factory)
        norm = cfg.has_qk_norm
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, **factory) if norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, **factory) if norm else None
        self.split = (q_size, kv_size, kv_size)
        self.gemm: Gemm = PackedLinear()
        self.pack()

    def pack(self) -> None:
        """q, k and v as one matmul (`fuse_rows`)."""
        self.qkv = fuse_rows(self.q_proj, self.k_proj, self.v_proj)

    @property
    def product_weight(self) -> torch.Tensor:
        """The weight this module's `gemm` multiplies by (q, k and v, fused)."""
        return self.qkv

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: _Step, layer: int
    ) -> torch.Tensor:
        tokens, heads, kv_heads = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = self.gemm(x, self.qkv, step.decode)
        if self.q_norm is not None and self.k_norm is not None:
            q, k, v = qkv.split(self.split, dim=-1)
            q = self.q_norm(q.view(tokens, heads, self.head_dim))
            k = self.k_norm(k.view(tokens, kv_heads, self.head_dim))
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        else:  # q and k rotated as one tensor: the same elementwise ops, half the calls
            qk, v = qkv.split((self.split[0] + self.split[1], self.split[2]), dim=-1)
            qk = apply_rope(qk.view(tokens, heads + kv_heads, self.head_dim), *rope)
            q, k = qk.split((heads, kv_heads), dim=1)
        v = v.view(tokens, kv_heads, self.head_dim)
        k_cache, v_cache = step.kv.k[layer], step.kv.v[layer]
        k_cache.index_copy_(0, step.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, step.slot_mapping, v.to(v_cache.dtype))
        out = paged_attention(q, k_cache, v_cache, step.plan)
        return self.o_proj(out.reshape(tokens, self.num_heads * self.head_dim), step.decode)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, **factory)
        self.self_attn = SelfAttention(cfg, **factory)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, **factory)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, **factory)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], step: _Step, layer: int
    ) -> torch.Tensor:
        # the residual adds go into the layers' fresh outputs (x + y is y + x bit for bit)
        x = self.self_attn(self.input_layernorm(x), rope, step, layer).add_(x)
        return self.mlp(self.post_attention_layernorm(x), step.decode).add_(x)


class _Step:
    """What every layer of one forward shares: the pool, the write slots, the attention plan,
    and whether it is a decode step (one query per sequence)."""

    __slots__ = ("kv", "slot_mapping", "plan", "decode")

    def __init__(
        self, kv: KVPool, slot_mapping: torch.Tensor, plan: AttentionPlan, decode: bool
    ) -> None:
        self.kv, self.slot_mapping, self.plan, self.decode = kv, slot_mapping, plan, decode


class DecoderBody(nn.Module):
    def __init__(self, cfg: ModelConfig, **factory: Any) -> None:
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, **factory)
        self.layers = nn.ModuleList(DecoderLayer(cfg, **factory) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, **factory)


class Decoder(nn.Module):
    """A causal LM over paged KV. Weights start uninitialized: load or initialize them.

    Build it with `Decoder(config, dtype, device)`, then fill the weights with
    `load_state_dict` (HF names) or `penelope_engine.model.tiny.init_random`.
    """

    def __init__(
        self,
        config: ModelConfig,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.config = config
        factory = {"dtype": dtype, "device": device}
        self.model = DecoderBody(config, **factory)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, **factory)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = RotaryCache(config.head_dim, config.rope_theta, config.max_position, device)

    def _apply(self, fn: Any, recurse: bool = True) -> Decoder:
        # Moves that build new tensors (dtype casts, to_empty, some device moves) untie
        # shared weights and split fused ones into separate tensors: tie and fuse again.
        super()._apply(fn, recurse)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        for module in self.modules():
            if isinstance(module, (SelfAttention, MLP)):
                module.pack()
        return self

    def products(self) -> list[SelfAttention | MLP | Linear]:
        """The modules whose `gemm` a step calls, each over its `product_weight` (the q/k/v
        and gate/up projections are views inside their fused weights)."""
        found: list[SelfAttention | MLP | Linear] = []
        for layer in self.model.layers:
            assert isinstance(layer, DecoderLayer)
            attn, mlp = layer.self_attn, layer.mlp
            found += [attn, attn.o_proj, mlp, mlp.down_proj]
        return [*found, self.lm_head]

    @property
    def weights(self) -> Weights:
        """The weight format the products run (`weight_formats.WEIGHT_FORMATS`'s name)."""
        gemm = self.lm_head.gemm
        return cast(Weights, gemm.name) if isinstance(gemm, QuantizedLinear) else "float"

    def use_weights(self, name: str) -> Decoder:
        """Give every product the strategy `name` (`weight_formats.WEIGHT_FORMATS`), once
        the weights are loaded and placed: ``int8`` / ``int4`` round them in place
        (`QuantizedLinear.quantize`; a tied embedding takes the rounded values too)."""
        make = WEIGHT_FORMATS.get(name)
        if name != "float" and self.device.type != "cpu":
            raise ValueError(f"{name} weights run on the CPU only")
        if name != "float" and not vectorized():
            log.warning(
                "%s weights: torch's %s kernel has no vectorized loop on this CPU (%s): "
                "decode runs its scalar loop, slower than float32 weights",
                name,
                name,
                torch.backends.cpu.get_cpu_capability(),
            )
        for module in self.products():
            gemm = make()
            if isinstance(gemm, QuantizedLinear):
                gemm.quantize(module.product_weight)
            module.gemm = gemm
        return self

    def prepare_decode(self) -> None:
        """Make every decode-step weight copy now (`gemm`), not at the first batched decode
        step; call it once the weights are loaded."""
        if self.device.type == "cpu" and self.dtype == torch.float32:
            cpu_kernels.available()  # build the paged decode kernel now, not at a first step
        for module in self.products():
            module.gemm.prepare(module.product_weight)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool) -> torch.Tensor:
        """Float32 logits ``[K, vocab]`` for the rows `meta.logits_indices` of this step."""
        if input_ids.shape != meta.positions.shape:
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)} and positions "
                f"{tuple(meta.positions.shape)} must both be [T]"
            )
        if kv.num_layers != self.config.num_layers:
            raise ValueError(f"KV pool has {kv.num_layers} layers, model {self.config.num_layers}")
        ratio = self.config.num_heads // self.config.num_kv_heads
        plan = AttentionPlan.build(
            meta, kv.page_size, ratio, self.dtype, meta.backend, kv.num_pages
        )
        decode = meta.num_seqs == int(input_ids.shape[0])
        return self.run_step(
            input_ids, meta.positions, meta.slot_mapping, meta.logits_indices, plan, kv, decode
        )

    @torch.inference_mode()
    def run_step(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        logits_rows: torch.Tensor,
        plan: AttentionPlan,
        kv: KVPool,
        decode: bool,
    ) -> torch.Tensor:
        """`forward` over a plan built already: device work only, no host sync, so a decode
        step can be captured as a CUDA graph (`decode_graphs`)."""
        step = _Step(kv, slot_mapping, plan, decode)
        hidden = self.model.embed_tokens(input_ids)
        rope = self.rotary.cos_sin(positions, hidden.dtype)
        for index, layer in enumerate(self.model.layers):
            hidden = layer(hidden, rope, step, index)
        last = self.model.norm(hidden.index_select(0, logits_rows))
        return self.lm_head(last, step.decode).float()
