"""Shared helpers for the model tests: small configs, HF reference models, step runners."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from penelope_engine.config import ModelConfig
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.decoder import Decoder
from penelope_engine.model.tiny import init_random, tiny_llama_config, tiny_qwen3_config
from penelope_engine.tiers.kv_pool import KVPool

SMALL_VOCAB = 512
# Below the registry's 0.3: with 0.3, Llama (no q/k norm) has attention logits so sharp that
# fp32 rounding alone moves HF's own logits ~2e-4 from a float64 forward.
TEST_SCALE = 0.2


def small_configs() -> list[ModelConfig]:
    """The tiny architectures with a small vocabulary, tied and untied."""
    qwen = tiny_qwen3_config(SMALL_VOCAB)
    llama = tiny_llama_config(SMALL_VOCAB)
    return [qwen, llama]


def random_model(cfg: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float32) -> Decoder:
    return init_random(Decoder(cfg), seed=seed, scale=TEST_SCALE).to(dtype)


def hf_reference(model: Decoder) -> torch.nn.Module:
    """The `transformers` model of the same architecture holding `model`'s weights."""
    cfg = model.config
    common = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position,
        rope_theta=cfg.rope_theta,
        rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )
    if cfg.arch == "qwen3":
        hf: torch.nn.Module = Qwen3ForCausalLM(Qwen3Config(**common))
    else:
        hf = LlamaForCausalLM(LlamaConfig(**common))
    hf.load_state_dict(model.state_dict(), strict=True)
    return hf.eval()


def hf_logits(hf: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def random_ids(n: int, seed: int, vocab: int = SMALL_VOCAB) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=gen).tolist()


def scattered_pages(num_pages: int, seed: int, pool_pages: int) -> torch.Tensor:
    """`num_pages` distinct pool pages in a shuffled order."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(pool_pages, generator=gen)[:num_pages]


def run_step(
    model: Decoder,
    kv: KVPool,
    seqs: list[tuple[list[int], list[int], torch.Tensor, int]],
    all_logits: bool = True,
) -> torch.Tensor:
    """One forward over `seqs`, each ``(token_ids, positions, page_table, context_len)``."""
    ids = torch.tensor([t for seq in seqs for t in seq[0]])
    meta = build_metadata(
        [s[1] for s in seqs],
        [s[2] for s in seqs],
        [s[3] for s in seqs],
        kv.page_size,
        all_logits=all_logits,
    )
    return model(ids, meta, kv)
