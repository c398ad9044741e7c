"""`Inspection`: what a bench, `penelope verify` or a test reads of an engine beside serving.

Serving never calls it. `Engine.inspect()` hands out one read-only view:

- `core`: the scheduling core the engine steps, the one the simulator shares
  (`bench.sim.replica.Replica.over_engine` drives it on a simulated clock);
- `hasher`: the core's page ids (the simulator names a fleet's pages with them);
- `run_batch`: one forward of a batch on the engine's model;
- `footprint()`: the counts a long-running engine must keep bounded (the soak bench).

Nothing here rewires the engine: the view holds references, and builds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from penelope_engine.cache.pages import PageHasher
from penelope_engine.core import Core
from penelope_engine.sched.sequence import BatchItem

if TYPE_CHECKING:
    from penelope_engine.tiers.handover import SessionHandover


@dataclass(frozen=True)
class Inspection:
    """An engine seen by a bench: its core, its model's forward and its bounded counts."""

    core: Core
    run_batch: Callable[[list[BatchItem]], list[int | None]]
    handover: SessionHandover | None  # None without a store

    @property
    def hasher(self) -> PageHasher:
        return self.core.hasher

    def footprint(self) -> dict[str, int | None]:
        """Requests finished so far, retention gaps held, sessions the handover knows
        (None without a store). Attribute reads only: safe beside the step thread."""
        handover = self.handover
        return {
            **self.core.scheduler.footprint(),
            "handover_sessions": len(handover.tenants) if handover is not None else None,
        }
