"""Hugging Face checkpoint directories: ``config.json`` + ``*.safetensors`` (+ tokenizer files).

Reads `LlamaForCausalLM` and `Qwen3ForCausalLM` checkpoints and writes the
same layout (the GGUF loader caches its conversion this way, and
`transformers` can load what we write).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from penelope_engine.config import ARCH_NAMES, Arch, ModelConfig, as_arch
from penelope_engine.errors import ConfigError
from penelope_engine.model.decoder import Decoder

# Our architectures (`config.Arch`) as HF names their classes; a test holds the keys equal.
ARCHITECTURES: dict[Arch, str] = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def config_from_hf(hf: dict[str, Any], name: str = "model") -> ModelConfig:
    """A `ModelConfig` from a ``config.json`` dict; unsupported features raise `ConfigError`."""
    model_type = hf.get("model_type")
    if model_type not in ARCH_NAMES:
        raise ConfigError(
            f"model_type {model_type!r} is not supported; use one of {sorted(ARCH_NAMES)}"
        )
    arch = as_arch(model_type)
    for flag in ("attention_bias", "mlp_bias", "use_sliding_window"):
        if hf.get(flag):
            raise ConfigError(f"{flag}=true is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"hidden_act {hf['hidden_act']!r} is not supported (only silu)")
    heads = int(hf["num_attention_heads"])
    return ModelConfig(
        arch=arch,
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(hf.get("head_dim") or int(hf["hidden_size"]) // heads),
        max_position=int(hf.get("max_position_embeddings", 8192)),
        rope_theta=_rope_theta(hf),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        name=name,
    )


def _rope_theta(hf: dict[str, Any]) -> float:
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ConfigError(f"rope scaling {kind!r} is not supported (only the default RoPE)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def config_to_hf(
    cfg: ModelConfig,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """The ``config.json`` dict `transformers` reads for `cfg`."""
    return {
        "architectures": [ARCHITECTURES[cfg.arch]],
        "model_type": cfg.arch,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_position,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": dtype,
    }


def load_safetensors_dir(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    name: str | None = None,
) -> tuple[ModelConfig, Decoder]:
    """Load a Hugging Face checkpoint directory into a `Decoder` named `name` (default: the
    directory's name)."""
    root = Path(path)
    if not (root / "config.json").is_file():
        raise ConfigError(f"{root} is not a checkpoint directory: it has no config.json")
    shards = sorted(root.glob("*.safetensors"))
    if not shards:
        raise ConfigError(f"{root} has no *.safetensors weights")
    cfg = config_from_hf(json.loads((root / "config.json").read_text()), name=name or root.name)
    model = Decoder(cfg, dtype, device)
    loaded: set[str] = set()
    for shard in shards:
        loaded |= _load_shard(model, load_file(str(shard)))
    missing = set(model.state_dict()) - loaded - _tied_names(cfg)
    if missing:
        raise ConfigError(f"{root}: weights missing from the checkpoint: {sorted(missing)[:8]}")
    return cfg, model


def _tied_names(cfg: ModelConfig) -> set[str]:
    return {"lm_head.weight"} if cfg.tie_word_embeddings else set()


@torch.no_grad()
def _load_shard(model: Decoder, tensors: dict[str, torch.Tensor]) -> set[str]:
    params = model.state_dict()
    skipped = _tied_names(model.config)
    for name, tensor in tensors.items():
        if name in skipped or name.endswith("rotary_emb.inv_freq"):
            continue
        if name not in params:
            raise ConfigError(f"unexpected weight {name!r} for a {model.config.arch} model")
        if tuple(params[name].shape) != tuple(tensor.shape):
            raise ConfigError(
                f"weight {name}: checkpoint shape {tuple(tensor.shape)}, "
                f"model expects {tuple(params[name].shape)}"
            )
        params[name].copy_(tensor)
    return set(tensors)


def save_safetensors_dir(
    model: Decoder,
    path: str | Path,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> None:
    """Write ``config.json`` and ``model.safetensors`` (tied ``lm_head`` left out, as HF does)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    skipped = _tied_names(model.config)
    tensors = {
        name: t.detach().cpu().clone()  # fused weights are views: safetensors wants own storage
        for name, t in model.state_dict().items()
        if name not in skipped
    }
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    dtype = str(model.dtype).removeprefix("torch.")
    hf = config_to_hf(model.config, bos_token_id, eos_token_id, dtype)
    (root / "config.json").write_text(json.dumps(hf, indent=2))
