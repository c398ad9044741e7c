"""Which engine replicas are up, and their latest `EngineStats`, as the ingress knows them.

Each engine replica reports its stats to the ingress as soon as it is up and
then every `REPORT_PERIOD_S` (`EngineReplica`), and says goodbye when it
leaves; the last output of every request carries them too. A replica that
stops reporting (killed, its node lost) is forgotten after `ttl_s`. So
`/metrics` lists every live replica from its start, and none that is gone.

A report reaches one ingress replica (Ray routes it like any call). With
several, each also reads the stats every engine replica puts in its routing
stats (`STATS_KEY`), which Ray's controller pulls and hands to the router of
every ingress replica (`router.local.routing_stats`): `merged` keeps, per
replica, the further along of the two (cumulative token counts never go
back), so every ingress exports every replica, exactly to within a period.

    engine replica --report(stats) every 2 s, report(None) on leaving--> book
    engine replica --routing stats, pulled by the controller--> every router
    ingress /metrics <-- merged(book.live(), routers' stats)
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import Callable, Mapping
from typing import Any

from cache_store import StoreStats
from penelope_engine.protocol import EngineStats

REPORT_PERIOD_S = 2.0
STATS_KEY = "engine_stats"  # the routing-stats key that carries a replica's EngineStats
STORE_KEY = "store_stats"  # ... and its Arrow store's StoreStats (absent without a store)
TTL_S = 3 * REPORT_PERIOD_S + 2.0  # three missed reports and a slow one


class ReplicaStatsBook:
    """Latest stats per replica id, with when each was heard from. One event loop only."""

    def __init__(self, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic):
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        self._stats: dict[str, tuple[float, EngineStats]] = {}
        self._stores: dict[str, StoreStats] = {}  # the replicas' Arrow stores, as last reported

    def report(
        self, replica: str, stats: EngineStats | None, store: StoreStats | None = None
    ) -> None:
        """`replica` is up with `stats` (and its store's counters, when given: a request's
        last output carries no store counters, and the last reported stand); None: it is
        leaving (forget it now)."""
        if stats is None:
            self._stats.pop(replica, None)
            self._stores.pop(replica, None)
            return
        self._stats[replica] = (self._clock(), stats)
        if store is not None:
            self._stores[replica] = store

    def live_stores(self) -> Mapping[str, StoreStats]:
        """The store counters of the live replicas that have a store."""
        live = self.live()
        for replica in [r for r in self._stores if r not in live]:
            del self._stores[replica]
        return dict(self._stores)

    def live(self) -> Mapping[str, EngineStats]:
        """Stats of the replicas heard from within `ttl_s` (drops the others)."""
        now = self._clock()
        for replica in [r for r, (t, _) in self._stats.items() if now - t > self.ttl_s]:
            del self._stats[replica]
        return {r: s for r, (_, s) in self._stats.items()}

    def clear(self) -> None:
        self._stats.clear()


def stats_to_wire(stats: EngineStats) -> dict[str, Any]:
    """`EngineStats` as plain data (routing stats travel as msgpack/JSON)."""
    return dataclasses.asdict(stats)


def stats_from_wire(data: object) -> EngineStats | None:
    """The inverse of `stats_to_wire`, typed by `EngineStats`' own annotations (nested
    stats dataclasses and tuples too); None for anything malformed (never an error: an
    ingress must not fail its /metrics over one replica's payload). An int is accepted
    where a float is declared (JSON drops `.0`); a field this ingress does not know is
    malformed too."""
    return _from_wire(data, EngineStats)


def store_from_wire(data: object) -> StoreStats | None:
    """`StoreStats` from plain data (`dataclasses.asdict`); None for anything malformed."""
    return _from_wire(data, StoreStats)


W = typing.TypeVar("W")


def _from_wire(data: object, declared: type[W]) -> W | None:
    try:
        value = _decode(data, declared)
    except (TypeError, ValueError):
        return None
    assert isinstance(value, declared)
    return value


def stores_merged(
    reported: Mapping[str, StoreStats], routed: Mapping[str, Mapping[str, Any]]
) -> dict[str, StoreStats]:
    """Per replica, its reported store counters, else those in its routing stats (a
    replica reports to one ingress; every router holds every replica's routing stats)."""
    out = dict(reported)
    for replica, payload in routed.items():
        if replica not in out and (store := store_from_wire(payload.get(STORE_KEY))):
            out[replica] = store
    return out


def _decode(value: object, declared: Any) -> Any:
    """A wire value as the declared type; ValueError where it does not fit."""
    if dataclasses.is_dataclass(declared) and isinstance(declared, type):
        if not isinstance(value, Mapping):
            raise ValueError(f"{declared.__name__}: not a mapping")
        hints = typing.get_type_hints(declared)
        names = {f.name for f in dataclasses.fields(declared)}
        if not value.keys() <= names:
            raise ValueError(f"{declared.__name__}: unknown fields {set(value) - names}")
        return declared(**{k: _decode(v, hints[k]) for k, v in value.items()})
    if typing.get_origin(declared) is tuple:
        args = typing.get_args(declared)
        if not isinstance(value, (list, tuple)):
            raise ValueError("not a sequence")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0]) for v in value)
        if len(value) != len(args):
            raise ValueError(f"{len(value)} values for {len(args)}")
        return tuple(_decode(v, a) for v, a in zip(value, args, strict=True))
    if declared is float and isinstance(value, (int, float)) and type(value) is not bool:
        return float(value)
    if declared in (int, str, bool) and type(value) is declared:
        return value
    raise ValueError(f"{value!r} is not a {declared}")


def _progress(s: EngineStats) -> int:
    """How far along a snapshot is: its cumulative counters, which never go back."""
    return s.tokens.sourced_tokens + sum(n for _, _, n in s.evictions)


def merged(
    reported: Mapping[str, EngineStats], routed: Mapping[str, Mapping[str, Any]]
) -> dict[str, EngineStats]:
    """Per replica, the further along of its report and its routing stats' snapshot.

    `routed`: each live replica's routing stats (what the routers hold)."""
    out = dict(reported)
    for replica, payload in routed.items():
        stats = stats_from_wire(payload.get(STATS_KEY))
        if stats is not None and (replica not in out or _progress(stats) > _progress(out[replica])):
            out[replica] = stats
    return out
