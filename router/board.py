"""Where sessions not yet in any digest were placed, shared by every router of a deployment.

Each process that calls the engine deployment has its own router (every ingress
replica has one). A new session's home depends on load, and each router sees
load partly through its own recent placements, so two routers can place one
session differently. Ray's HTTP proxy keeps a session on one ingress replica
only when the client names it in ``x-session-id``; Claude Code names it in
``x-claude-code-session-id`` and Codex in the body (``prompt_cache_key``), so
their next turn may reach another ingress replica before the engine replica's
digest (a stats period later) shows where the session lives.

A board settles that: the first router to place a session claims its replica,
and every later claim for it, from any router, gets that replica back, until
the claim expires (``assignment_ttl_s``) or its replica leaves. Once a digest
shows the session, digests decide and the board is not asked.

Kinds (``placements`` in the router's options):
    ray      one small Ray actor per deployment, named after it, created by the
             first router that needs it (and again if it dies); the product's
    process  one table per deployment in this process (routers of one process)
    none     no board: each router places by its own view

A board never makes a request wait long or fail: a claim has a deadline
(``START_DEADLINE_S`` until the actor first answers, since it starts a worker;
then ``CLAIM_DEADLINE_S``), and after a failure the router places by its own view
for ``BACKOFF_S``. The actor shares its creator's fate; when it dies with that
router's process, the next claim makes another at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from penelope_engine.registry import Registry
from router.assignments import AssignmentTable

logger = logging.getLogger("ray.serve")

CLAIM_DEADLINE_S = 0.5  # a claim slower than this is abandoned; the router's own choice stands
START_DEADLINE_S = 10.0  # the same, while the actor has not answered yet (a worker starts)
BACKOFF_S = 10.0  # after a failed claim, no claims for this long
BOARD_NAMESPACE = "penelope"  # the Ray namespace of the board actors


class PlacementBoard(Protocol):
    async def claim(
        self, session_id: str, replica_id: str, live_ids: Collection[str]
    ) -> str | None:
        """The replica ``session_id`` is placed on: an earlier claim's, if its replica is in
        ``live_ids``, else ``replica_id`` (now claimed). None when the board cannot answer."""
        ...

    def settle(self, session_id: str, replica_id: str) -> None:
        """Record where ``session_id`` was finally sent (it may differ from its claim when
        the claimed replica was full). Never waits."""
        ...


class ClaimTable:
    """The board's state: a bounded, expiring claim per session. One thread: the `ray`
    board's actor is this class (a sync actor runs one call at a time, so claims are
    atomic)."""

    def __init__(
        self, ttl_s: float, capacity: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._table = AssignmentTable(ttl_s, capacity)
        self._clock = clock

    def claim(self, session_id: str, replica_id: str, live_ids: Collection[str]) -> str:
        return self._table.claim(session_id, replica_id, live_ids, self._clock())

    def settle(self, session_id: str, replica_id: str) -> None:
        self._table.put(session_id, replica_id, self._clock())

    def __len__(self) -> int:
        return len(self._table)


class ProcessBoard:
    """A board shared by the routers of one deployment in this process."""

    def __init__(self, table: ClaimTable) -> None:
        self._table = table

    async def claim(self, session_id: str, replica_id: str, live_ids: Collection[str]) -> str:
        return self._table.claim(session_id, replica_id, live_ids)

    def settle(self, session_id: str, replica_id: str) -> None:
        self._table.settle(session_id, replica_id)


class RayBoard:
    """A client of the deployment's board actor: connects lazily, bounds every claim by
    ``deadline_s``, and after a failure (no Ray, actor dead, too slow) answers None for
    ``backoff_s``, logging once per outage."""

    def __init__(
        self,
        name: str,
        ttl_s: float,
        capacity: int,
        deadline_s: float = CLAIM_DEADLINE_S,
        backoff_s: float = BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._args = (ttl_s, capacity)
        self._deadline_s = deadline_s
        self._backoff_s = backoff_s
        self._clock = clock
        self._actor: Any = None
        self._ready = False  # the actor has answered a call
        self._down_until = 0.0
        try:  # start it now, so that it is up when the first session comes
            self._connect()
        except Exception:  # noqa: BLE001 - no Ray here yet: the first claim says so
            self._actor = None

    async def claim(
        self, session_id: str, replica_id: str, live_ids: Collection[str]
    ) -> str | None:
        if self._clock() < self._down_until:
            return None
        for attempt in range(2):
            try:
                ref = self._connect().claim.remote(session_id, replica_id, sorted(live_ids))
                deadline = self._deadline_s if self._ready else START_DEADLINE_S
                held = await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline)
            except Exception as exc:  # noqa: BLE001 - any failure means "no board": place locally
                if attempt == 0 and _actor_died(exc):  # its creator left: make another, now
                    self._actor, self._ready = None, False
                    continue
                self._fail(exc)
                return None
            self._ready = True
            return held if isinstance(held, str) else None
        return None

    def settle(self, session_id: str, replica_id: str) -> None:
        if self._actor is None or self._clock() < self._down_until:
            return
        try:
            self._actor.settle.remote(session_id, replica_id)
        except Exception as exc:  # noqa: BLE001 - a lost settle only costs affinity
            self._fail(exc)

    def _connect(self) -> Any:
        if self._actor is None:
            import ray

            if not ray.is_initialized():
                raise RuntimeError("Ray is not initialized in this process")
            self._actor = ray.remote(ClaimTable).options(
                name=self._name, namespace=BOARD_NAMESPACE, get_if_exists=True, num_cpus=0
            ).remote(*self._args)
        return self._actor

    def _fail(self, exc: BaseException) -> None:
        if self._clock() >= self._down_until:
            logger.warning(
                "Penelope router: placement board %s unavailable (%s: %s); placing by this "
                "router's own view for %.0f s",
                self._name, type(exc).__name__, exc, self._backoff_s,
            )  # fmt: skip
        self._actor, self._ready = None, False  # reconnect (get or create) after the backoff
        self._down_until = self._clock() + self._backoff_s


def _actor_died(exc: BaseException) -> bool:
    from ray.exceptions import RayActorError

    return isinstance(exc, RayActorError)


_PROCESS_TABLES: dict[str, ClaimTable] = {}


def _no_board(name: str, ttl_s: float, capacity: int) -> PlacementBoard | None:
    return None


def _process_board(name: str, ttl_s: float, capacity: int) -> PlacementBoard:
    return ProcessBoard(
        _PROCESS_TABLES.setdefault(name, ClaimTable(ttl_s, capacity))
    )


BoardFactory = Callable[[str, float, int], "PlacementBoard | None"]
PLACEMENT_BOARDS: Registry[BoardFactory] = Registry(
    "placement board", {"ray": RayBoard, "process": _process_board, "none": _no_board}
)


def make_board(kind: str, name: str, ttl_s: float, capacity: int) -> PlacementBoard | None:
    """The board of kind ``kind`` (``PLACEMENT_BOARDS``) for the deployment called ``name``."""
    return PLACEMENT_BOARDS.get(kind)(name, ttl_s, capacity)
