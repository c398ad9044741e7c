"""sgl-router's ``manual`` policy (sticky sessions), pinned to its source.

Source: sglang-router 0.3.2 = lightseekorg/smg 4e108ef08197b42580768de054cf6e5ea5da1344,
``src/policies/manual.rs`` (m:N: ``select_by_routing_id`` 162-192, ``select_worker_impl``
194-213, ``push_bounded`` 86-91, ``find_healthy_worker`` 233-246, ``random_select`` 252-256,
``select_min_by`` 258-288, eviction 117-129);
defaults from the wheel's ``sglang_router/router_args.py`` (assignment_mode random,
max_idle_secs 14400, eviction_interval_secs 60).

The last test runs the 0.3.2 binary itself (``python -m sglang_router.launch_router
--policy manual`` over stub workers) and checks the same rules on it; it skips where
``sglang_router`` is not importable (the project's venv), and `make test` runs this
module again in ``.venv-peers`` (``scripts/peers_env.sh``), where it runs.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.peers.base import PeerRequest, PeerView
from bench.peers.registry import make_sim_router
from bench.peers.sgl_sticky import SglStickyConfig, SglStickyRouter, _Node
from penelope_engine.errors import ConfigError
from router.schema import RouterConfig


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def views(*loads: int, ids: tuple[str, ...] | None = None) -> list[PeerView]:
    names = ids if ids is not None else tuple(f"r{i}" for i in range(len(loads)))
    return [PeerView(rid, load, 8) for rid, load in zip(names, loads)]


def sticky(seed: int = 0, clock: FakeClock | None = None, **options: object) -> SglStickyRouter:
    return SglStickyRouter(
        RouterConfig(seed=seed),
        clock or FakeClock(),
        SglStickyConfig(**options),  # type: ignore[arg-type]
    )


def route(router: SglStickyRouter, vs: list[PeerView], sid: str | None) -> tuple[str, str]:
    choice = router.choose(vs, PeerRequest(session_id=sid))
    return choice.replica_id, choice.decision.reason


def test_defaults_are_the_cli_defaults_and_bad_knobs_are_refused() -> None:
    cfg = SglStickyConfig()
    assert (cfg.assignment_mode, cfg.max_idle_s, cfg.eviction_interval_s) == ("random", 14400, 60)
    for bad in (
        {"assignment_mode": "min_group"},  # a real mode, not modelled: refused, not guessed
        {"max_idle_s": -1.0},
        {"eviction_interval_s": -1.0},
    ):
        with pytest.raises(ConfigError):
            SglStickyConfig(**bad)  # type: ignore[arg-type]
    assert isinstance(make_sim_router("sgl_sticky"), SglStickyRouter)


def test_a_session_stays_on_its_worker_however_busy_or_full_it_is() -> None:
    r = sticky()
    home, why = route(r, views(0, 0, 0), "s")
    assert why == "vacant"
    loads = [0, 0, 0]
    loads[int(home[1])] = 500  # far over max_ongoing (8); the others idle
    for _ in range(5):  # m:170-176: a live remembered worker is taken, load unread
        assert route(r, views(*loads), "s") == (home, "occupied_hit")
    assert r.routing_map["s"].workers == [home]


def test_first_requests_are_spread_at_random_not_by_load() -> None:
    r = sticky(seed=3)
    vs = views(0, 90, 90)  # r0 idle, r1 and r2 busy
    picks = Counter(route(r, vs, f"s{i}")[0] for i in range(600))
    # random_select (m:252-256): uniform over healthy workers; min_load would give all to r0
    assert set(picks) == {"r0", "r1", "r2"}
    assert all(150 < n < 250 for n in picks.values()), picks


def test_min_load_mode_places_new_sessions_on_the_least_loaded() -> None:
    r = sticky(assignment_mode="min_load")
    assert route(r, views(5, 2, 9), "a") == ("r1", "vacant")
    ties = Counter(route(r, views(4, 1, 1), f"t{i}")[0] for i in range(200))
    assert set(ties) == {"r1", "r2"}  # select_min_by: ties at random (m:282-287)


def test_a_session_is_replaced_when_its_worker_vanishes_and_returns_to_it_after() -> None:
    r = sticky(seed=1)
    home = route(r, views(0, 0, 0), "s")[0]
    others = tuple(x for x in ("r0", "r1", "r2") if x != home)
    choice = r.choose(views(0, 0, ids=others), PeerRequest(session_id="s"))
    new = choice.replica_id
    # m:177-181: no remembered worker is live: a new one, appended to the candidates
    assert (new in others, choice.decision.reason) == (True, "occupied_miss")
    assert choice.decision.rehomed_from == home
    assert r.routing_map["s"].workers == [home, new]
    assert route(r, views(0, 0, ids=others), "s") == (new, "occupied_hit")
    # the old worker back: the candidates are searched oldest first (m:238-244), so home wins
    assert route(r, views(0, 0, 0), "s") == (home, "occupied_hit")


def test_candidates_are_bounded_at_two_oldest_dropped() -> None:
    r = sticky(assignment_mode="min_load")
    assert route(r, views(0, 1, 1, 1, ids=("a", "b", "c", "d")), "s")[0] == "a"
    assert route(r, views(0, 1, 1, ids=("b", "c", "d")), "s") == ("b", "occupied_miss")
    assert route(r, views(0, 1, ids=("c", "d")), "s") == ("c", "occupied_miss")
    assert r.routing_map["s"].workers == ["b", "c"]  # push_bounded dropped "a" (m:86-91)
    # "a" returns but is no longer remembered; "c" is
    assert route(r, views(0, 9, ids=("a", "c")), "s") == ("c", "occupied_hit")


def test_without_a_session_each_request_is_placed_anew_and_nothing_is_kept() -> None:
    r = sticky(seed=5)
    picks = {route(r, views(0, 0, 0), None) for _ in range(60)}
    assert {why for _, why in picks} == {"no_routing_id"}  # m:209-212
    assert len({rid for rid, _ in picks}) == 3
    assert r.routing_map == {}


def test_idle_sessions_are_forgotten_at_the_eviction_tick() -> None:
    clock = FakeClock()
    r = sticky(seed=2, clock=clock, assignment_mode="min_load")
    assert route(r, views(0, 5), "old")[0] == "r0"
    clock.now += 3600.0
    assert route(r, views(5, 0), "young")[0] == "r1"
    # the ticks run every 60 s from t0 = 1000; at tick 1000 + 14400 "old" has been idle
    # exactly max_idle (14400 >= 14400: evicted, m:128-129); "young" 10800 s: kept
    clock.now = 1000.0 + 14400.0 + 30.0
    assert route(r, views(0, 5), "young") == ("r1", "occupied_hit")
    assert "old" not in r.routing_map
    assert route(r, views(9, 0), "old") == ("r1", "vacant")


def test_no_replicas_and_same_seed_same_choices() -> None:
    assert sticky().rank([], PeerRequest(session_id="s")).ranks == ()
    with pytest.raises(ValueError):
        sticky().choose([], PeerRequest(session_id="s"))
    a, b = sticky(seed=7), sticky(seed=7)
    vs = views(0, 0, 0, 0)
    assert [route(a, vs, f"s{i}") for i in range(50)] == [route(b, vs, f"s{i}") for i in range(50)]
    assert a.sync_replicas({"r0"}) == []


# -- the 0.3.2 binary ---------------------------------------------------------------------


class _Worker(BaseHTTPRequestHandler):
    """A stub SGLang worker: answers the router's probes, names itself on /generate."""

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # /health, /server_info, /model_info
        self._reply({"model_path": "stub", "tokenizer_path": "stub", "is_generation": True})

    def do_POST(self) -> None:  # /generate
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        name = self.server.name  # type: ignore[attr-defined]
        self._reply({"text": name, "meta_info": {"finish_reason": {"type": "stop"}}})


class _RealRouter:
    """``python -m sglang_router.launch_router --policy manual`` over stub workers."""

    def __init__(self, workers: int) -> None:
        self.servers = []
        for i in range(workers):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _Worker)
            server.name = f"w{i}"  # type: ignore[attr-defined]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.urls = {
            f"w{i}": f"http://127.0.0.1:{s.server_port}" for i, s in enumerate(self.servers)
        }
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        argv = ["--worker-urls", *self.urls.values(), "--policy", "manual", "--host", "127.0.0.1"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", *argv, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.wait_for(lambda: len(self.live()) == workers)

    def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["X-SMG-Routing-Key"] = key
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data, headers, method=method
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def route(self, key: str | None) -> str:
        return str(self.call("POST", "/generate", {"text": "hi"}, key)["text"])

    def live(self) -> dict[str, str]:
        """Healthy workers: stub name -> the router's worker id."""
        try:
            workers = self.call("GET", "/workers")["workers"]
        except OSError:
            return {}
        names = {url: name for name, url in self.urls.items()}
        return {names[w["url"]]: w["id"] for w in workers if w["is_healthy"]}

    def wait_for(self, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            assert self.proc.poll() is None, "the router exited"
            assert time.monotonic() < deadline, "the router did not get ready"
            time.sleep(0.2)

    def remove(self, name: str) -> None:
        self.call("DELETE", f"/workers/{self.live()[name]}")
        self.wait_for(lambda: name not in self.live())

    def add(self, name: str) -> None:
        self.call("POST", "/workers", {"url": self.urls[name]})
        self.wait_for(lambda: name in self.live())

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for server in self.servers:
            server.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_0_3_2_binary_sticks_fails_over_and_returns_like_the_model() -> None:
    if importlib.util.find_spec("sglang_router") is None:
        pytest.skip("sglang_router (the 0.3.2 wheel) is not importable")
    real = _RealRouter(3)
    model = sticky(seed=0)
    try:
        keys = [f"s{i}" for i in range(24)]
        first = {k: real.route(k) for k in keys}
        assert len(set(first.values())) > 1  # placed at random, not all on one worker
        assert {k: real.route(k) for k in keys} == first  # and then kept
        for k, home in first.items():  # the model, told the binary's first picks, keeps them
            model.routing_map[k] = _Node([home], 0.0, home)
        everyone = ("w0", "w1", "w2")
        assert all(route(model, views(0, 0, 0, ids=everyone), k)[0] == first[k] for k in keys)

        gone = first["s0"]
        real.remove(gone)
        left = tuple(w for w in everyone if w != gone)
        moved = real.route("s0")
        assert moved != gone and real.route("s0") == moved  # re-placed, then kept
        model_moved, why = route(model, views(0, 0, ids=left), "s0")
        assert (model_moved != gone, why) == (True, "occupied_miss")
        model.routing_map["s0"].workers[-1] = moved  # the binary's draw, for what follows
        for k in keys:  # the others on live workers stay; those on the gone one move
            if first[k] != gone:
                assert real.route(k) == first[k]

        real.add(gone)  # back: the oldest remembered worker is searched first
        assert real.route("s0") == gone
        assert route(model, views(0, 0, 0, ids=everyone), "s0") == (gone, "occupied_hit")
        unkeyed = Counter(real.route(None) for _ in range(60))
        assert len(unkeyed) > 1  # no routing key: placed at random every time
    finally:
        real.close()
