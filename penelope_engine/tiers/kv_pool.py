"""KV storage: one K and one V tensor per layer, addressed by flat slot.

Layout of each tensor: ``[num_pages * page_size, num_kv_heads, head_dim]``.
Token ``t`` of page ``p`` lives in slot ``p * page_size + t``. A pool only
holds bytes; which pages are free is the allocator's job
(`penelope_engine.cache.allocator`), and which pages hold what is the cache's.
"""

from __future__ import annotations

import torch

from penelope_engine.config import ModelConfig

# Keyed by `config.DType` (a test holds the names equal).
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class KVPool:
    def __init__(
        self,
        model: ModelConfig,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype,
        device: str | torch.device = "cpu",
        pin_memory: bool = False,
    ) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_layers = model.num_layers
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_pages * page_size, model.num_kv_heads, model.head_dim)
        pin = pin_memory and torch.cuda.is_available() and self.device.type == "cpu"
        self.k = [
            torch.zeros(shape, dtype=dtype, device=self.device, pin_memory=pin)
            for _ in range(model.num_layers)
        ]
        self.v = [
            torch.zeros(shape, dtype=dtype, device=self.device, pin_memory=pin)
            for _ in range(model.num_layers)
        ]

    @property
    def bytes_per_page(self) -> int:
        t = self.k[0]
        return 2 * self.num_layers * self.page_size * t.shape[1] * t.shape[2] * t.element_size()

    def page_slots(self, pages: torch.Tensor) -> torch.Tensor:
        """Flat slot indices of every token of `pages`, in page order."""
        offs = torch.arange(self.page_size, device=pages.device)
        return (pages[:, None] * self.page_size + offs[None, :]).reshape(-1)

    def read_pages(self, pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy of the KV of `pages`: two tensors ``[layers, n*page_size, kv_heads, head_dim]``."""
        slots = self.page_slots(pages.to(self.device))
        return (torch.stack([k[slots] for k in self.k]), torch.stack([v[slots] for v in self.v]))

    def write_pages(self, pages: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write KV shaped as `read_pages` returns it into `pages`."""
        slots = self.page_slots(pages.to(self.device))
        for layer in range(self.num_layers):
            self.k[layer][slots] = k[layer].to(self.device, self.dtype, non_blocking=True)
            self.v[layer][slots] = v[layer].to(self.device, self.dtype, non_blocking=True)
