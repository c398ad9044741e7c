"""Penelope's use of SGLang's host tier (HiCache): copy shelved pages device <-> host.

SGLang's `HiCacheController` moves a *tree node's* KV: `write` backs a node up
(device -> host) on its write stream, and `load` brings a host-only node back
below a device-resident parent, layer by layer on its load stream, with the
forward pass waiting on `layer_done_counter` per layer. Neither fits a shelved
suffix: it is not in the tree (its parent is a hole), so there is no node to
load, and the refill request that recomputes the hole must finish first.

So Penelope takes the refill path (`refill`): the refill request recomputes
the hole; then, when its insert makes the head device-resident, the shelf's
host span is copied back here, synchronously, through the same host pool and
the same I/O backend (`hicache_io_backend`) the controller uses
(`backup_from_device_all_layer` / `load_to_device_per_layer`, with the
controller's own index placement, `move_indices`), and inserted with the
device suffix. The copy is waited for before the tree publishes the slots,
so no forward pass can read them early; the cost is that the copy is not
overlapped with compute the way SGLang's own layer-wise load-back is.

Host slots come from the controller's host pool (`mem_pool_host`), so SGLang's
own host accounting sees them as used and its host eviction makes room around
them.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import PoolName


class HostTier:
    """Synchronous page copies between the device KV pool and HiCache's host KV pool."""

    def __init__(self, controller: Any, device_pool: Any) -> None:
        self.controller = controller
        self.group = controller.mem_pool_host
        self.kv_host = self.group.get_pool(PoolName.KV)
        self.device_pool = device_pool
        self.io_backend = controller.io_backend

    @classmethod
    def of(cls, cache: Any) -> HostTier | None:
        """The host tier of a `UnifiedRadixCache`, or None when HiCache is off."""
        controller = getattr(cache, "cache_controller", None)
        if controller is None:
            return None
        return cls(controller, cache.token_to_kv_pool_allocator.get_kvcache())

    def available(self) -> int:
        return int(self.group.available_size(PoolName.KV))

    def backup(self, device_slots: torch.Tensor) -> torch.Tensor | None:
        """Copy the KV of `device_slots` to new host slots; None when the host is full."""
        host_slots = self.group.alloc(len(device_slots), pool=PoolName.KV)
        if host_slots is None:
            return None
        host, device = self.controller.move_indices(host_slots, device_slots)
        self.kv_host.backup_from_device_all_layer(self.device_pool, host, device, self.io_backend)
        self._wait()
        return host_slots.to(torch.int64).cpu()

    def load(self, host_slots: torch.Tensor, device_slots: torch.Tensor) -> None:
        """Copy host KV into `device_slots` (already allocated), every layer, and wait."""
        host, device = self.controller.move_indices(
            host_slots.to(self.kv_host_index_dtype()), device_slots
        )
        for layer_id in range(self.kv_host.layer_num):
            self.kv_host.load_to_device_per_layer(
                self.device_pool, host, device, layer_id, self.io_backend
            )
        self._wait()

    def free(self, host_slots: torch.Tensor) -> None:
        if len(host_slots):
            self.group.free(host_slots, pool=PoolName.KV)

    def kv_host_index_dtype(self) -> torch.dtype:
        return torch.int64

    def _wait(self) -> None:
        device = torch.device(getattr(self.device_pool, "device", "cpu"))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
