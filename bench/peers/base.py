"""What the peers' router models share: their inputs and the skeleton of a router.

The product routes on a queue and a digest (`router.schema.ReplicaView`,
`RouteRequest`). KV-event routers (Dynamo's, llm-d's precise prefix scorer,
Ray's KV-aware router) also learn from each replica's KV events and load
reports, and the prompt-tree routers read every page of the prompt; those
fields are the benchmark's contract, so they live here:

    CachedRun    a prompt's leading pages a replica holds, by tier (its KV events)
    PeerView     ReplicaView + kv usage, active pages, waiting work, a prompt's cached run
    PeerRequest  RouteRequest + every full page's hash of the prompt
    PeerRouter   the constructor (config, clock, options, then `setup`), `choose` = the
                 first-ranked replica, the no-op hooks, and `reads_prompt` /
                 `reads_kv_state`: what a caller must fill in (the simulator skips what a
                 router does not read)

A peer model subclasses `PeerRouter` and writes `rank`, and `setup` for state of its
own; it overrides `choose`, `remember` or `sync_replicas` only where the system it
models does more.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar, cast

from router.policies import RouterFactory, RoutingPolicy
from router.schema import Choice, ReplicaView, RouteDecision, RouterConfig, RouteRequest


class CachedRun(NamedTuple):
    """Leading pages of a page sequence a replica holds, up to its first miss, by tier."""

    device: int = 0
    host: int = 0
    store: int = 0

    @property
    def pages(self) -> int:
        return self.device + self.host + self.store


@dataclass(frozen=True)
class PeerView(ReplicaView):
    """A replica as a KV-event router sees it. Where a caller has no KV state, the
    fields say "nothing cached, nothing running"."""

    kv_usage: float = 0.0  # device pages running requests hold / device pages (vLLM's usage)
    active_pages: int = 0  # device pages held by the requests running there
    waiting_tokens: int = 0  # prompt tokens of requests queued there, not yet admitted
    waiting_requests: int = 0  # requests queued there, not yet admitted
    cached: Callable[[Sequence[int]], CachedRun] | None = None  # a prompt's cached run
    page_size: int = 16  # tokens per page (a KV block) on this replica


@dataclass(frozen=True)
class PeerRequest(RouteRequest):
    """A request as a prompt-tree router sees it."""

    prompt_pages: tuple[int, ...] = ()  # every full page's hash


def first_ranked(decision: RouteDecision) -> Choice:
    """The decision's first-ranked replica, full or not: what a router that sends each
    request to its single pick does (Dynamo, sgl-router's manual policy, llm-d)."""
    if not decision.ranks:
        raise ValueError("cannot pick a replica: there are none")
    return Choice(decision.ranks[0][0], decision)


Options = TypeVar("Options")


class PeerRouter(Generic[Options]):
    """The skeleton every peer model shares; `rank` is the model's own."""

    name: str
    reads_prompt: ClassVar[bool] = False  # needs PeerRequest.prompt_pages
    reads_kv_state: ClassVar[bool] = False  # needs PeerView's KV fields
    make_options: ClassVar[Callable[[], Any]]  # the options' defaults (the system's own)

    def __init__(
        self,
        config: RouterConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        options: Options | None = None,
    ) -> None:
        self.config = config if config is not None else RouterConfig()
        self.options: Options = options if options is not None else type(self).make_options()
        self._clock = clock
        self._rng = random.Random(self.config.seed)
        self.setup()

    def setup(self) -> None:
        """The model's own state, once config, options and clock are set."""

    def rank(self, views: Sequence[PeerView], request: PeerRequest) -> RouteDecision:
        raise NotImplementedError

    def choose(self, views: Sequence[PeerView], request: PeerRequest) -> Choice:
        """The first-ranked replica, full or not."""
        return first_ranked(self.rank(views, request))

    def remember(self, session_id: str, replica_id: str, reported: bool = False) -> None:
        """No session memory beyond what `rank` keeps."""

    def sync_replicas(self, live_ids: Collection[str]) -> list[str]:
        """Replicas are followed through the views; no sessions to move."""
        return []


def peer_factory(cls: type[PeerRouter[Any]]) -> RouterFactory:
    """`cls` as a routing-policy factory (the simulator hands it `PeerView`s and
    `PeerRequest`s, the subtypes of what the product's policies read)."""
    return cast(RouterFactory, cls)


def with_options(cls: type[PeerRouter[Any]], name: str, options: object) -> RouterFactory:
    """A factory of peer router `cls` built with `options` and named `name` (a variant
    registered beside the class's defaults, e.g. a peer at a documented threshold)."""

    def make(config: RouterConfig, clock: Callable[[], float] = time.monotonic) -> RoutingPolicy:
        router = cls(config, clock, options)
        router.name = name
        return cast(RoutingPolicy, router)

    make.__name__ = make.__qualname__ = name
    return make


def variants(
    cls: type[PeerRouter[Any]], tag: str, values: Sequence[float], options: Callable[[Any], object]
) -> dict[str, RouterFactory]:
    """Factories of `cls` built with `options(value)`, one per value, each named
    `<cls.name>_<tag><value>` (e.g. a peer at each documented threshold)."""
    names = [f"{cls.name}_{tag}{v:g}" for v in values]
    return {n: with_options(cls, n, options(v)) for n, v in zip(names, values)}


def reads_prompt(router: object) -> bool:
    """Whether `router` needs every page of the prompt (`PeerRequest.prompt_pages`)."""
    return isinstance(router, PeerRouter) and router.reads_prompt


def reads_kv_state(router: object) -> bool:
    """Whether `router` needs the replicas' KV state (`PeerView`'s fields)."""
    return isinstance(router, PeerRouter) and router.reads_kv_state
