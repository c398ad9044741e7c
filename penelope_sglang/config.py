"""`SGLangEngineConfig`: what the adapter passes to `sglang.Engine`. No SGLang needed.

The one definition of the `engine: sglang` settings: `serve_config.yaml`'s `sglang:`
section validates into it at the YAML edge (`deployments.ray.serve_config`), and
`engine.SGLangEngine` takes it, so the config parses on machines without SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from penelope_engine.errors import ConfigError

BACKEND_NAME = "penelope"  # the radix-cache backend the plugin registers


@dataclass(frozen=True)
class SGLangEngineConfig:
    """What the adapter passes to `sglang.Engine` (all validated here)."""

    model_path: str
    page_size: int = 16
    load_format: str = "auto"  # "dummy": random weights from the model's config
    dtype: str = "auto"
    context_length: int | None = None
    max_total_tokens: int | None = None  # KV capacity in tokens; None: from memory
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    radix_cache_backend: str | None = BACKEND_NAME  # None: SGLang's default tree
    random_seed: int = 0

    def __post_init__(self) -> None:
        if not self.model_path:
            raise ConfigError("model_path must name a model directory or hub id")
        if self.page_size < 1:
            raise ConfigError(f"page_size must be positive, got {self.page_size}")
        if self.max_total_tokens is not None and self.max_total_tokens < self.page_size:
            raise ConfigError("max_total_tokens must hold at least one page")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ConfigError("mem_fraction_static must be in (0, 1)")

    def engine_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model_path": self.model_path,
            "page_size": self.page_size,
            "load_format": self.load_format,
            "dtype": self.dtype,
            "random_seed": self.random_seed,
            "incremental_streaming_output": True,
            "log_level": "error",
        }
        optional = {
            "context_length": self.context_length,
            "max_total_tokens": self.max_total_tokens,
            "mem_fraction_static": self.mem_fraction_static,
            "chunked_prefill_size": self.chunked_prefill_size,
            "radix_cache_backend": self.radix_cache_backend,
        }
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        return kwargs
