"""KV storage: one K and one V tensor per layer, addressed by flat slot.

Layout of each tensor: ``[num_pages * page_size, num_kv_heads, head_dim]``.
Token ``t`` of page ``p`` lives in slot ``p * page_size + t``, so a page is one
contiguous row of each tensor (`page_rows`), and pages are copied as rows. A pool only
holds bytes; which pages are free is the allocator's job
(`penelope_engine.cache.allocator`), and which pages hold what is the cache's.
"""

from __future__ import annotations

import torch

from penelope_engine.config import ModelConfig
from penelope_engine.options import DTYPE_NAMES

# Each `options.DType` name as torch's dtype, and back (a segment names its dtype).
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
NAMES_OF_DTYPES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


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

    def page_rows(self, t: torch.Tensor) -> torch.Tensor:
        """One of this pool's layer tensors as one row per page (a view): a page's K or V
        of one layer is contiguous, so pages move as whole rows (`tiers.transfer`)."""
        return t.view(self.num_pages, -1)

    def read_pages(self, pages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy of the KV of `pages`: two tensors ``[layers, n*page_size, kv_heads, head_dim]``."""
        idx = pages.to(self.device)
        shape = (len(idx) * self.page_size, *self.k[0].shape[1:])

        def gather(side: list[torch.Tensor]) -> torch.Tensor:
            return torch.stack([self.page_rows(t).index_select(0, idx).view(shape) for t in side])

        return gather(self.k), gather(self.v)

    def write_pages(self, pages: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write KV shaped as `read_pages` returns it into `pages`."""
        idx = pages.to(self.device)
        for side, new in ((self.k, k), (self.v, v)):
            for layer in range(self.num_layers):
                rows = new[layer].to(self.device, self.dtype, non_blocking=True)
                self.page_rows(side[layer]).index_copy_(0, idx, rows.reshape(len(idx), -1))

    def zero_slots(self, slots: torch.Tensor) -> None:
        """Zero the K and V of `slots` in every layer."""
        if len(slots) == 0:
            return
        idx = slots.to(self.device)
        for side in (self.k, self.v):
            for layer in range(self.num_layers):
                side[layer].index_fill_(0, idx, 0)
