"""The session endpoint's hints (`POST /v1/penelope/sessions/{id}`) on the SGLang backend.

The path under test, from the app's backend down to SGLang's tree:
`LocalBackend.session_hints` (what the endpoint calls) -> the real adapter
(`SGLangEngine.session_hints`) -> SGLang's RPC wire (`RpcReqInput` over a real
ZMQ DEALER pair made by SGLang's `get_zmq_socket`, msgpack as SGLang encodes it)
-> the scheduler hook (`hooks.handle_rpc_request`) -> `between_turns.apply` on a
real `PenelopeRadixCache` built by SGLang's test kit, whose eviction then runs.

Stand-ins, named: `sglang.Engine` (it serves on CUDA only) is an object holding
the engine's end of the RPC socket; SGLang's `Scheduler` (it does not run on CPU)
is `SchedulerEnd`, a thread that reads the scheduler's end of the socket and calls
the same hook SGLang's dispatcher calls. The HTTP app itself (`create_app`) needs
packages this venv does not carry (prometheus_client, httpx); the route only parses
the body (`hints.session_endpoint_hints`, tested here for its 400s) and calls
`Backend.session_hints`, and tests/cpu/deployments/test_session_endpoint_http.py
runs it over HTTP on the embedded engine.
"""

from __future__ import annotations

import asyncio
import json
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import zmq
from pydantic import ValidationError
from sglang.srt.managers.io_struct import RpcReqOutput, sock_recv, sock_send
from sglang.srt.managers.kv_hints import decode_kv_hints_envelope
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.utils.network import get_zmq_socket
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang_helpers import accounting_holds, build_penelope

from deployments.api.backend import LocalBackend
from deployments.api.errors import ApiError
from deployments.api.hints import grants_body, session_endpoint_hints
from deployments.api.schemas import SessionHintsRequest
from penelope_engine.errors import EngineError
from penelope_engine.hints import SessionHints
from penelope_sglang import engine as adapter
from penelope_sglang import hint_rpc, hooks
from penelope_sglang.between_turns import MAX_PIN_S
from penelope_sglang.engine import SGLangEngine, SGLangEngineConfig
from penelope_sglang.sessions import SessionHint

KV = 256
CFG = CacheConfig(page_size=4, kv_size=KV)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class SchedulerEnd:
    """Stand-in for SGLang's scheduler loop on the RPC channel: receive, dispatch through
    the hook (SGLang's own `handle_rpc_request` is the `original`), answer."""

    def __init__(self, context: zmq.Context, endpoint: str, cache: Any) -> None:
        self.socket = get_zmq_socket(context, zmq.DEALER, endpoint, False)
        self.scheduler = SimpleNamespace(tree_cache=cache)
        self.seen: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @staticmethod
    def original(scheduler: Any, req: Any) -> RpcReqOutput:
        return RpcReqOutput(success=False, message=f"no method {req.method}")

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.socket.poll(20, zmq.POLLIN):
                continue
            req = sock_recv(self.socket)
            self.seen.append(req)
            sock_send(self.socket, hooks.handle_rpc_request(self.original, self.scheduler, req))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close(linger=0)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    cache, allocator, _ = build_penelope(CFG)
    cache.evictor.clock = Clock()
    context = zmq.Context(1)
    endpoint = f"ipc://{tmp_path}/rpc"
    engine_end = get_zmq_socket(context, zmq.DEALER, endpoint, True)
    scheduler = SchedulerEnd(context, endpoint, cache)
    (tmp_path / "config.json").write_text(
        json.dumps({"max_position_embeddings": 4096, "vocab_size": 1000})
    )
    monkeypatch.setattr(adapter, "register", lambda: None)
    monkeypatch.setattr(
        adapter.sglang, "Engine", lambda **_: SimpleNamespace(send_to_rpc=engine_end)
    )
    monkeypatch.setattr(adapter.Tokenizer, "from_dir", staticmethod(lambda _: SimpleNamespace()))
    engine = SGLangEngine(SGLangEngineConfig(str(tmp_path)))
    try:
        yield SimpleNamespace(
            backend=LocalBackend(engine), cache=cache, allocator=allocator, scheduler=scheduler
        )
    finally:
        scheduler.close()
        engine_end.close(linger=0)
        context.term()


def turn(env: SimpleNamespace, session: str, tokens: list[int], tenant: str | None = None) -> None:
    """One finished request of `session` (no hints of its own), as SGLang runs it: queued
    (`note_request`), its KV inserted, released (`views.settle`)."""
    cache = env.cache
    cache.evictor.clock.t += 1.0
    envelope = decode_kv_hints_envelope(SessionHint(session).envelope(f"m-{session}"))
    req = SimpleNamespace(
        rid=f"r-{session}",
        origin_input_ids=tokens,
        output_ids=[],
        kv_hints=envelope,
        extra_key=None,
        cache_salt=tenant,
        cached_tokens=0,
    )
    cache.note_request(req, RadixKey(array("q", tokens[:-1]), None, cache_salt=tenant))
    slots = env.allocator.alloc(len(tokens))
    assert slots is not None
    cache.insert(
        InsertParams(key=RadixKey(array("q", tokens), None, cache_salt=tenant), value=slots)
    )
    cache.views.settle(session, req)


def tokens(base: int, pages: int) -> list[int]:
    return list(range(base, base + 4 * pages))


def on_device(env: SimpleNamespace, session: str) -> int:
    """Device tokens the session's history still holds (the digests' own walk)."""
    return env.cache.views.held(env.cache.book.get(session))[0]


def hint(env: SimpleNamespace, session: str, tenant: str = "default", **body: Any) -> dict:
    """What the endpoint does with a body: parse it (400s), call the backend, answer."""
    hints = session_endpoint_hints(SessionHintsRequest(**body))
    grants = asyncio.run(env.backend.session_hints(session, tenant, hints))
    return grants_body(tuple(grants))


def test_a_retained_session_outlives_an_unhinted_one_under_pressure(served) -> None:
    turn(served, "kept", tokens(100, 6))  # the older one: LRU would take it first
    turn(served, "other", tokens(200, 6))
    assert hint(served, "kept", retain_s=30) == {
        "retain_s": {"asked": 30, "granted": 30, "clipped_by": None}
    }
    served.cache.evict(EvictParams(num_tokens=KV))
    assert (on_device(served, "kept"), on_device(served, "other")) == (24, 0)
    accounting_holds(served.cache, served.allocator, KV)
    served.cache.evictor.clock.t += 31  # past the pin (30 s from the turn's end)
    served.cache.evict(EvictParams(num_tokens=KV))
    assert on_device(served, "kept") == 0
    accounting_holds(served.cache, served.allocator, KV)


def test_a_gap_hint_reorders_the_victims(served) -> None:
    turn(served, "soon", tokens(100, 2))  # oldest: LRU's first victim without hints
    turn(served, "later", tokens(200, 2))
    turn(served, "plain", tokens(300, 2))
    assert hint(served, "soon", expected_gap_s=5)["expected_gap_s"]["granted"] == 5
    assert hint(served, "later", expected_gap_s=600)["expected_gap_s"]["granted"] == 600
    served.cache.evict(EvictParams(num_tokens=8))
    held = {s: on_device(served, s) for s in ("soon", "later", "plain")}
    assert held == {"soon": 8, "later": 0, "plain": 8}  # the latest expected return went
    served.cache.evictor.clock.t += 3  # "soon" is due 2 s from now; "plain", by its age, at 6 s
    served.cache.evict(EvictParams(num_tokens=8))
    assert (on_device(served, "soon"), on_device(served, "plain")) == (8, 0)


def test_end_session_makes_it_the_first_victim(served) -> None:
    for name, base in (("a", 100), ("b", 200), ("done", 300)):
        turn(served, name, tokens(base, 2))  # "done" is the most recent
    assert hint(served, "done", end_session=True) == {
        "end_session": {"asked": True, "granted": True, "clipped_by": None}
    }
    served.cache.evict(EvictParams(num_tokens=8))
    assert [on_device(served, s) for s in ("a", "b", "done")] == [8, 8, 0]


def test_end_session_drops_a_pin(served) -> None:
    turn(served, "s", tokens(100, 2))
    hint(served, "s", retain_s=60)
    assert served.cache.pins.pinned() == 1
    hint(served, "s", end_session=True)
    assert served.cache.pins.pinned() == 0
    served.cache.evict(EvictParams(num_tokens=KV))
    assert on_device(served, "s") == 0


def test_an_unknown_session_or_another_tenants_changes_nothing(served) -> None:
    turn(served, "mine", tokens(100, 2), tenant="alpha")
    # the embedded engine's shape: 200, every hint refused with its reason
    assert hint(served, "nobody", "alpha", expected_gap_s=3, end_session=True) == {
        "expected_gap_s": {"asked": 3, "granted": None, "clipped_by": "no_session"},
        "end_session": {"asked": True, "granted": None, "clipped_by": "no_session"},
    }
    assert hint(served, "mine", "beta", retain_s=30) == {
        "retain_s": {"asked": 30, "granted": None, "clipped_by": "tenant"}
    }
    assert hint(served, "mine", "beta", end_session=True)["end_session"]["clipped_by"] == "tenant"
    entry = served.cache.book.get("mine")
    assert not entry.ended and entry.retain_until == 0 and served.cache.pins.pinned() == 0
    assert hint(served, "mine", "alpha", expected_gap_s=2)["expected_gap_s"]["granted"] == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "expected_gap_s"),
        ({"retain_s": 5, "end_session": True}, "end_session"),
    ],
)
def test_a_bad_body_is_a_400_and_leaves_the_sessions_alone(served, body, param) -> None:
    turn(served, "s", tokens(100, 2))
    turn(served, "t", tokens(200, 2))
    hint(served, "t", expected_gap_s=7)
    before = [
        (e.session, e.retain_until, e.expected_gap_s, e.ended) for e in served.cache.book.entries()
    ]
    sent = len(served.scheduler.seen)
    with pytest.raises(ApiError) as err:
        hint(served, "s", **body)
    assert err.value.status == 400 and err.value.param == param
    after = [
        (e.session, e.retain_until, e.expected_gap_s, e.ended) for e in served.cache.book.entries()
    ]
    assert after == before and len(served.scheduler.seen) == sent  # nothing reached SGLang


@pytest.mark.parametrize("body", [{"expected_gap_s": -1}, {"retain_s": "5"}, {"ended": True}])
def test_a_body_of_bad_fields_is_refused_by_its_schema(body) -> None:
    with pytest.raises(ValidationError):  # the app answers these 400 (errors.validation_error)
        SessionHintsRequest(**body)


def test_a_bad_value_past_the_edge_is_refused_by_the_scheduler_and_changes_nothing(
    served,
) -> None:
    turn(served, "s", tokens(100, 2))
    bad = hint_rpc.rpc_input("r1", "s", "default", SessionHints())
    bad.parameters["retain_s"] = -1.0  # the edge never sends it
    out = hooks.handle_rpc_request(SchedulerEnd.original, served.scheduler.scheduler, bad)
    assert not out.success and "retain_s" in out.message
    with pytest.raises(EngineError):
        hint_rpc.grants_of(out)
    assert served.cache.book.get("s").retain_until == 0 and served.cache.pins.pinned() == 0


def test_retain_s_is_capped_and_needs_pages_on_the_device(served) -> None:
    turn(served, "long", tokens(100, 2))
    grant = hint(served, "long", retain_s=3600)["retain_s"]
    assert grant == {"asked": 3600, "granted": MAX_PIN_S, "clipped_by": "tenant_pin_seconds"}
    served.cache.evictor.clock.t += MAX_PIN_S + 1
    served.cache.evict(EvictParams(num_tokens=KV))
    assert on_device(served, "long") == 0
    assert hint(served, "long", retain_s=30)["retain_s"]["clipped_by"] == "no_cached_pages"
    assert served.cache.pins.pinned() == 0


def test_a_tenants_hints_stop_at_its_fair_share_of_the_device(served) -> None:
    """Two tenants on 256 tokens: alpha's hinted sessions may hold 128 of them."""
    turn(served, "b", tokens(1000, 4), tenant="beta")
    turn(served, "a0", tokens(2000, 20), tenant="alpha")  # 80 tokens
    turn(served, "a1", tokens(3000, 14), tenant="alpha")  # 56 more: 136 > 128
    assert hint(served, "a0", "alpha", expected_gap_s=0)["expected_gap_s"]["clipped_by"] is None
    refused = hint(served, "a1", "alpha", retain_s=60, expected_gap_s=0)
    assert refused == {
        "expected_gap_s": {"asked": 0, "granted": None, "clipped_by": "tenant_fair_share"},
        "retain_s": {"asked": 60, "granted": 0.0, "clipped_by": "tenant_fair_share"},
    }
    entry = served.cache.book.get("a1")
    assert entry.expected_gap_s is None and entry.lock is None  # not applied
    assert hint(served, "b", "beta", retain_s=60)["retain_s"]["granted"] == 60


def test_the_next_request_ends_a_gap_sent_between_turns(served) -> None:
    turn(served, "s", tokens(100, 2))
    hint(served, "s", expected_gap_s=5)
    assert served.cache.book.get("s").expected_gap_s == 5
    turn(served, "s", tokens(100, 3))  # its next request carries no gap
    assert served.cache.book.get("s").expected_gap_s is None


def test_without_an_rpc_channel_every_hint_is_refused(tmp_path, monkeypatch) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"max_position_embeddings": 4096, "vocab_size": 1000})
    )
    monkeypatch.setattr(adapter, "register", lambda: None)
    monkeypatch.setattr(adapter.sglang, "Engine", lambda **_: SimpleNamespace(send_to_rpc=None))
    monkeypatch.setattr(adapter.Tokenizer, "from_dir", staticmethod(lambda _: SimpleNamespace()))
    engine = SGLangEngine(SGLangEngineConfig(str(tmp_path)))
    grants = asyncio.run(engine.session_hints("s", "default", SessionHints(expected_gap_s=1)))
    assert [g.clipped_by for g in grants] == ["no_session"]
