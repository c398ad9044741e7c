"""Which engine replicas are up, and their latest `EngineStats`, as the ingress knows them.

Each engine replica reports its stats to the ingress as soon as it is up and
then every `REPORT_PERIOD_S` (`EngineReplica`), and says goodbye when it
leaves; the last output of every request carries them too. A replica that
stops reporting (killed, its node lost) is forgotten after `ttl_s`. So
`/metrics` lists every live replica from its start, and none that is gone.

    engine replica --report(stats) every 2 s, report(None) on leaving--> book
    ingress /metrics <-- book.live(): replicas heard from in the last ttl_s
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from penelope_engine.protocol import EngineStats

REPORT_PERIOD_S = 2.0
TTL_S = 3 * REPORT_PERIOD_S + 2.0  # three missed reports and a slow one


class ReplicaStatsBook:
    """Latest stats per replica id, with when each was heard from. One event loop only."""

    def __init__(self, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic):
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        self._stats: dict[str, tuple[float, EngineStats]] = {}

    def report(self, replica: str, stats: EngineStats | None) -> None:
        """`replica` is up with `stats`; None: it is leaving (forget it now)."""
        if stats is None:
            self._stats.pop(replica, None)
        else:
            self._stats[replica] = (self._clock(), stats)

    def live(self) -> Mapping[str, EngineStats]:
        """Stats of the replicas heard from within `ttl_s` (drops the others)."""
        now = self._clock()
        for replica in [r for r, (t, _) in self._stats.items() if now - t > self.ttl_s]:
            del self._stats[replica]
        return {r: s for r, (_, s) in self._stats.items()}

    def clear(self) -> None:
        self._stats.clear()
