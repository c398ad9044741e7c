"""`Tier`: where a page's KV is. One name for it everywhere: tree codes, eviction, planner.

The values are the codes of the int8 arrays `Node.where()` and `Match.where`
return, so `where == Tier.DEVICE` works on them directly. `HOLE` is no tier:
the page's KV is nowhere and must be recomputed. `label` is the name that
metrics, JSON and segment listings print.
"""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    DEVICE = 0
    HOST = 1
    STORE = 2
    HOLE = 3

    @property
    def label(self) -> str:
        return self.name.lower()
