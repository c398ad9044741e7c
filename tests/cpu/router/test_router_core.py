"""The routing core with hand-built replica views: no Ray, no cluster."""

from __future__ import annotations

from collections import Counter

import pytest

from penelope_engine.errors import ConfigError, UnknownNameError
from router import (
    AffinityRouter,
    Pow2Router,
    ReplicaDigest,
    ReplicaView,
    RouterConfig,
    RouteRequest,
    SessionHolding,
    make_routing_policy,
    pick_replica,
    rendezvous_order,
    rendezvous_pick,
)

IDS = ("r0", "r1", "r2", "r3")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def held(device: int = 0, host: int = 0, store: int = 0) -> SessionHolding:
    return SessionHolding(device, host, store, last_access=1.0)


def view(
    rid: str,
    queue: int = 0,
    sessions: dict[str, SessionHolding] | None = None,
    prefix: tuple[int, ...] = (),
    max_ongoing: int = 10,
    ts: float = 0.0,
) -> ReplicaView:
    digest = ReplicaDigest(sessions=sessions or {}, prefix_hashes=frozenset(prefix), ts=ts)
    return ReplicaView(rid, queue, max_ongoing, digest)


def idle_views() -> list[ReplicaView]:
    return [view(rid) for rid in IDS]


def session_homed_on(target: str, ids: tuple[str, ...] = IDS) -> str:
    """A session id whose rendezvous pick among ``ids`` is ``target``."""
    return next(f"s{i}" for i in range(1000) if rendezvous_pick(f"s{i}", ids) == target)


def test_returning_session_goes_to_replica_retaining_most_weighted_tokens() -> None:
    router = AffinityRouter()
    views = [view("r0", sessions={"s": held(host=1000)}), view("r1", sessions={"s": held(800)})]
    views += [view("r2"), view("r3")]
    choice = router.choose(views, RouteRequest("s"))
    assert (choice.replica_id, choice.decision.reason) == ("r1", "holder")  # 800 > 0.5 * 1000

    views[1] = view("r1", sessions={"s": held(device=100)})
    views[0] = view("r0", sessions={"s": held(store=1000)})
    assert AffinityRouter().choose(views, RouteRequest("s")).replica_id == "r0"  # 250 > 100


def test_session_sticks_to_its_holder_turn_after_turn() -> None:
    router = AffinityRouter()
    sid = session_homed_on("r0")
    views = [view(rid, sessions={sid: held(500)} if rid == "r2" else {}) for rid in IDS]
    chosen = {router.choose(views, RouteRequest(sid)).replica_id for _ in range(20)}
    assert chosen == {"r2"}


def test_overloaded_holder_falls_back_to_less_loaded_of_a_deterministic_pair() -> None:
    sessions = {"s": held(4000)}
    views = [view("r0", queue=8, sessions=sessions), view("r1", 3), view("r2", 1), view("r3", 2)]
    decision = AffinityRouter().rank(views, RouteRequest("s"))
    assert decision.overloaded and decision.reason == "holder"
    pair = decision.ranks[0]
    assert len(pair) == 2 and "r0" not in pair
    assert decision.ranks[-1][-1] == "r0"  # the holder stays a last resort
    chosen = AffinityRouter().choose(views, RouteRequest("s")).replica_id
    loads = {v.replica_id: v.queue_len for v in views}
    assert chosen == min(pair, key=loads.__getitem__)
    assert AffinityRouter().rank(views, RouteRequest("s")) == decision  # routers agree


def test_holder_below_the_threshold_keeps_the_session() -> None:
    views = [view("r0", queue=7, sessions={"s": held(4000)})] + [view(r) for r in IDS[1:]]
    choice = AffinityRouter(RouterConfig(overload_ratio=0.75)).choose(views, RouteRequest("s"))
    assert choice.replica_id == "r0" and not choice.decision.overloaded


def test_full_pair_spills_to_the_rest() -> None:
    views = [view("r0", queue=10, sessions={"s": held(4000)})] + [view(r) for r in IDS[1:]]
    pair = AffinityRouter().rank(views, RouteRequest("s")).ranks[0]
    views = [view("r0", queue=10, sessions={"s": held(4000)})]
    views += [view(r, 10 if r in pair else 5) for r in IDS[1:]]
    chosen = AffinityRouter().choose(views, RouteRequest("s")).replica_id
    assert chosen not in pair and chosen != "r0"


def test_new_session_picks_the_longer_prefix_of_its_two_choices() -> None:
    views = [view("r0", prefix=(11,)), view("r1", prefix=(11, 22))]
    choice = AffinityRouter().choose(views, RouteRequest("new", prefix_hashes=(11, 22, 33)))
    assert (choice.replica_id, choice.decision.reason) == ("r1", "prefix")

    strict = AffinityRouter(RouterConfig(min_prefix_pages=3))
    assert strict.rank(views, RouteRequest("new", prefix_hashes=(11, 22, 33))).reason == "hash"
    off = AffinityRouter(RouterConfig(prefix_affinity=False))
    assert off.rank(views, RouteRequest("new", prefix_hashes=(11, 22))).reason == "hash"


def test_one_prefix_holder_does_not_attract_every_new_session() -> None:
    """Every agent shares the system prompt: the first replica to cache it must not
    take all new sessions. Two hashed choices per session, the prefix breaks ties."""
    views = [view(rid, prefix=(7,) if rid == "r1" else ()) for rid in IDS]
    router = AffinityRouter()
    homes = Counter(
        router.choose(views, RouteRequest(f"n{i}", prefix_hashes=(7,))).replica_id
        for i in range(400)
    )
    assert set(homes) == set(IDS) and min(homes.values()) > 40  # about 67 each
    assert homes["r1"] == max(homes.values())  # about 200: in half of the pairs


def active(tokens: int, ts: float = 1000.0, age: float = 0.0) -> SessionHolding:
    return SessionHolding(tokens, 0, 0, last_access=ts - age)


def test_new_session_takes_the_lighter_of_its_two_choices() -> None:
    sid = "new-session"
    first, second = rendezvous_order(sid, IDS)[:2]
    heavy = {first: {"a": active(50_000), "b": active(40_000)}, second: {"c": active(10_000)}}
    views = [view(r, sessions=heavy.get(r, {}), ts=1000.0) for r in IDS]
    decision = AffinityRouter().rank(views, RouteRequest(sid))
    assert (decision.ranks[0], decision.reason) == ((second,), "balance")
    # the same tokens, idle for longer than the active window, weigh nothing
    idle = {
        r: {k: active(v.device_tokens, age=301.0) for k, v in s.items()} for r, s in heavy.items()
    }
    views = [view(r, sessions=idle.get(r, {}), ts=1000.0) for r in IDS]
    assert AffinityRouter().rank(views, RouteRequest(sid)).ranks[0] == (first,)


def test_near_equal_loads_leave_the_choice_to_the_prefix() -> None:
    sid = "new-session"
    first, second = rendezvous_order(sid, IDS)[:2]
    sessions = {first: {"a": active(10_000)}, second: {"b": active(10_500)}}
    prefix = {second: (7,)}
    views = [view(r, sessions=sessions.get(r), prefix=prefix.get(r, ()), ts=1000.0) for r in IDS]
    decision = AffinityRouter().rank(views, RouteRequest(sid, prefix_hashes=(7, 8)))
    assert (decision.ranks[0], decision.reason) == ((second,), "prefix")


def test_sessions_in_flight_count_before_any_digest_shows_them() -> None:
    clock = FakeClock()
    router = AffinityRouter(clock=clock)
    views = idle_views()
    homes = Counter(router.choose(views, RouteRequest(f"n{i}")).replica_id for i in range(40))
    # hashing alone puts 14 of these 40 on r2 and 8 on r0; in-flight assignments
    # count as load, so the two-choice pick keeps the shares within two of each other
    assert max(homes.values()) - min(homes.values()) <= 2, homes
    assert router.active_load(views) == {r: float(n) for r, n in homes.items()}


def test_two_router_instances_agree_without_talking() -> None:
    a, b = AffinityRouter(), AffinityRouter()
    views = idle_views()
    homes_a = [a.choose(views, RouteRequest(f"n{i}")).replica_id for i in range(400)]
    homes_b = [b.choose(views, RouteRequest(f"n{i}")).replica_id for i in range(400)]
    assert homes_a == homes_b
    assert min(Counter(homes_a).values()) > 60  # about 100 each


def test_routed_session_sticks_until_its_replica_reports_it() -> None:
    clock = FakeClock()
    router = AffinityRouter(clock=clock)
    sid = session_homed_on("r0")
    busy = [view("r0", queue=10)] + [view(r) for r in IDS[1:]]
    first = router.choose(busy, RouteRequest(sid)).replica_id
    assert first != "r0"

    clock.now += 5
    choice = router.choose(idle_views(), RouteRequest(sid))
    assert (choice.replica_id, choice.decision.reason) == (first, "assigned")

    old_holder = [view(r, sessions={sid: held(9000)} if r == "r0" else {}) for r in IDS]
    assert router.choose(old_holder, RouteRequest(sid)).replica_id == first

    reported = [view(r, sessions={sid: held(100)} if r == first else {}) for r in IDS]
    choice = router.choose(reported, RouteRequest(sid))
    assert (choice.replica_id, choice.decision.reason) == (first, "holder")


def test_placement_already_in_a_digest_is_left_to_the_digests() -> None:
    router = AffinityRouter()
    sid = session_homed_on("r0")
    holds = [view(r, sessions={sid: held(64)} if r == "r2" else {}) for r in IDS]
    assert router.choose(holds, RouteRequest(sid)).replica_id == "r2"
    evicted = idle_views()  # r2 dropped the session entirely: nothing pins it there
    assert router.choose(evicted, RouteRequest(sid)).decision.reason == "hash"


def test_unreported_assignment_expires() -> None:
    clock = FakeClock()
    router = AffinityRouter(RouterConfig(assignment_ttl_s=30), clock=clock)
    sid = session_homed_on("r0")
    router.remember(sid, "r3")
    assert router.choose(idle_views(), RouteRequest(sid)).replica_id == "r3"
    clock.now += 31
    assert router.rank(idle_views(), RouteRequest(sid)).ranks[0] == ("r0",)


def test_assignment_table_is_bounded() -> None:
    router = AffinityRouter(RouterConfig(max_assignments=2))
    sid = session_homed_on("r0")
    router.remember(sid, "r3")
    router.remember("x", "r1")
    router.remember("y", "r1")
    assert router.rank(idle_views(), RouteRequest(sid)).ranks[0] == ("r0",)


def test_removed_replica_rehomes_its_sessions_and_only_them() -> None:
    router = AffinityRouter()
    sid = session_homed_on("r1")
    assert router.choose(idle_views(), RouteRequest(sid)).replica_id == "r1"
    homes = {f"n{i}": rendezvous_pick(f"n{i}", IDS) for i in range(300)}

    assert router.sync_replicas({"r0", "r2", "r3"}) == [sid]
    survivors = [view(r) for r in IDS if r != "r1"]
    choice = router.choose(survivors, RouteRequest(sid))
    assert choice.replica_id != "r1" and choice.decision.rehomed_from == "r1"
    assert router.rank(survivors, RouteRequest(sid)).rehomed_from is None  # settled again
    fresh = AffinityRouter()  # no sessions in flight: new homes are the rendezvous picks
    for sid_n, home in homes.items():
        new_home = fresh.rank(survivors, RouteRequest(sid_n)).ranks[0][0]
        assert new_home == home or home == "r1"


def test_sessionless_requests_are_spread_and_not_remembered() -> None:
    router = AffinityRouter(RouterConfig(seed=3))
    views = idle_views()
    homes = Counter(router.choose(views, RouteRequest(None)).replica_id for _ in range(200))
    assert len(homes) == 4
    same = {router.choose(views, RouteRequest(None, request_id="q1")).replica_id for _ in range(5)}
    assert len(same) == 1
    prefixed = [view(r, prefix=(5,) if r == "r2" else ()) for r in IDS]
    favoured = Counter(
        router.choose(prefixed, RouteRequest(None, prefix_hashes=(5,))).replica_id
        for _ in range(200)
    )
    assert favoured["r2"] == max(favoured.values())


def test_no_replicas_gives_an_empty_decision() -> None:
    assert AffinityRouter().rank([], RouteRequest("s")).ranks == ()
    with pytest.raises(ValueError, match="none"):
        pick_replica((), {})


def test_pick_replica_when_everything_is_full_takes_the_least_loaded() -> None:
    views = {v.replica_id: v for v in (view("a", 12), view("b", 10), view("c", 11))}
    assert pick_replica((("a", "c"),), views) == "b"
    assert pick_replica((("a", "c"),), {**views, "d": view("d", 3)}) == "d"


def test_pow2_picks_the_less_loaded_of_two_random_choices() -> None:
    pow2 = make_routing_policy("pow2", RouterConfig(seed=1))
    assert isinstance(pow2, Pow2Router)
    views = [view("a", 5), view("b", 1)]
    assert {pow2.choose(views, RouteRequest("s")).replica_id for _ in range(20)} == {"b"}
    many = [view(f"x{i}", i) for i in range(8)]
    chosen = [pow2.choose(many, RouteRequest("s")) for _ in range(200)]
    assert all(len(c.decision.ranks[0]) == 2 for c in chosen)
    assert len({c.replica_id for c in chosen}) > 3  # no stickiness
    again = make_routing_policy("pow2", RouterConfig(seed=1))
    repeat = [again.choose(views, RouteRequest("s")).decision for _ in range(20)]
    first = make_routing_policy("pow2", RouterConfig(seed=1))
    assert repeat == [first.choose(views, RouteRequest("s")).decision for _ in range(20)]


def test_policy_registry_names_the_valid_choices() -> None:
    assert isinstance(make_routing_policy("affinity"), AffinityRouter)
    with pytest.raises(UnknownNameError, match="valid: affinity, pow2"):
        make_routing_policy("round_robin")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"overload_ratio": 0.0},
        {"overload_ratio": 1.5},
        {"host_weight": 2.0},
        {"store_weight": -1.0},
        {"min_holder_tokens": 0},
        {"min_prefix_pages": 0},
        {"assignment_ttl_s": 0},
        {"max_assignments": 0},
        {"active_window_s": 0},
        {"balance_slack": 1.0},
        {"balance_slack": -0.1},
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RouterConfig(**kwargs)


def test_config_from_kwargs_names_unknown_options() -> None:
    assert RouterConfig.from_kwargs({"overload_ratio": 0.5}).overload_ratio == 0.5
    with pytest.raises(ConfigError, match="overload_ration.*valid: .*overload_ratio"):
        RouterConfig.from_kwargs({"overload_ration": 0.5})
