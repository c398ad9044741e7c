"""The whole Ray Serve application on a local Ray: 2 engine replicas of the tiny model.

4 agent sessions x 3 turns, concurrently, through Serve's HTTP proxy: every
session stays on one replica (the cache-affinity router), turns 2 and 3 report
cached tokens, and the ingress's /metrics shows every replica's ratios (every
replica from its start, before it served anything). The engine deployment runs
the KV-aware autoscaling policy (pinned at 2 replicas). Last, a replica is
killed while it streams: the client gets an error event and [DONE], the
session's next turn is served by a live replica, and the dead one leaves
/metrics. /v1/messages and /v1/responses (stateless, and a stored chain that either
ingress replica continues) take the same path.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
from ray import serve
from ray.serve import api as serve_api

from bench.cluster.app import wait_running
from bench.net import free_port
from deployments.metrics.autoscaling import OCCUPANCY, RECOMPUTE, WORKING_SET
from deployments.ray.builder import ENGINE_DEPLOYMENT, build_application
from deployments.ray.launch import RAY_PROCESS_ENV
from deployments.ray.serve_config import parse_serve_config
from router.digest import decode_digest

# Ray's start-up and the replicas' model loads take a minute here; past 10 the run is stuck.
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]
STARTUP_TIMEOUT_S = 300

ROOT = Path(__file__).resolve().parents[3]
MODEL = "tiny-qwen3"
SESSIONS = 4
TURNS = 3
SYSTEM = "You are a coding agent with tools: read_file, edit_file, run_tests. " * 3


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**RAY_PROCESS_ENV, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for key, value in RAY_PROCESS_ENV.items():  # the local Ray's own processes inherit these
        os.environ.setdefault(key, value)
    # address="local": a Ray of the test's own, never a cluster named by RAY_ADDRESS or by
    # a stale /tmp/ray/ray_current_cluster.
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=False,
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = parse_serve_config(
        {
            "engine": {
                "model": MODEL,
                "cache": {"page_size": 4, "device_pages": 512},
                "scheduler": {"max_batch_tokens": 512, "prefill_chunk": 256},
            },
            "engine_deployment": {
                "num_cpus": 0.5,
                "max_ongoing_requests": 8,
                "max_queued_requests": 4,  # a burst past 2 x 8 + 4 per handle: 429s
                "autoscaling": {"min_replicas": 2, "max_replicas": 2},
            },
            "ingress": {"num_cpus": 0.1, "num_replicas": 2},
            "router": {"stats_period_s": 0.5},
            # stored responses where both ingress replicas read them (no KV store here)
            "api": {"responses_store_uri": str(tmp_path_factory.mktemp("responses"))},
        }
    )
    try:
        # serve.run waits for the application with no deadline; its non-waiting form
        # (serve.api._run, _blocking=False) lets wait_running fail with the app's status.
        serve_api._run(
            build_application(config), name="penelope", route_prefix="/", _blocking=False
        )
        wait_running(STARTUP_TIMEOUT_S)  # bench.cluster.config.APP is "penelope"
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


async def run_session(client: httpx.AsyncClient, sid: str) -> list[tuple[str, int]]:
    """(replica, cached_tokens) of each turn of one session."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Task {sid}: fix the build."},
    ]
    turns = []
    for turn in range(TURNS):
        body = {"model": MODEL, "messages": messages, "max_tokens": 4, "temperature": 0}
        r = await client.post("/v1/chat/completions", json=body, headers={"x-session-id": sid})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        turns.append(
            (r.headers["x-penelope-replica"], usage["prompt_tokens_details"]["cached_tokens"])
        )
        messages += [
            {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
            {"role": "user", "content": f"Tool output {turn}: ok."},
        ]
    return turns


async def run_sessions(base_url: str) -> dict[str, list[tuple[str, int]]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        sids = [f"session-{i}" for i in range(SESSIONS)]
        results = await asyncio.gather(*(run_session(client, sid) for sid in sids))
    return dict(zip(sids, results, strict=True))


def replicas_on_metrics(base_url: str) -> set[str]:
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    return set(re.findall(r'penelope_pages_capacity\{replica="([^"]+)",tier="device"\}', text))


def wait_for_replicas(base_url: str, done: Any, timeout_s: float) -> set[str]:
    """The replicas /metrics lists, once `done(replicas)` holds or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while not done(replicas := replicas_on_metrics(base_url)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return replicas


def test_every_replica_is_on_metrics_before_it_served_a_request(base_url: str) -> None:
    replicas = wait_for_replicas(base_url, lambda r: len(r) == 2, timeout_s=60)
    assert len(replicas) == 2, replicas
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    for replica in replicas:  # nothing served yet: reported by the replicas themselves
        assert f'penelope_tokens_total{{replica="{replica}",source="new"}} 0.0' in text


def test_sessions_stay_on_their_replica_and_hit_the_cache(base_url: str) -> None:
    sessions = asyncio.run(run_sessions(base_url))
    for sid, turns in sessions.items():
        replicas = {replica for replica, _ in turns}
        assert len(replicas) == 1, (sid, turns)
        cached = [c for _, c in turns]
        # Turn 1 may reuse the system prompt another session cached on that replica;
        # turns 2 and 3 also reuse the session's own history.
        assert 0 < cached[1] and cached[0] < cached[1] < cached[2], (sid, turns)

    served = {replica for turns in sessions.values() for replica, _ in turns}
    # A replica's stats reach the ingress with its routing stats, a moment after it served.
    text = _scrape_until(
        base_url, lambda t: all(_gauge(t, "penelope_cache_hit_ratio", r) > 0 for r in served)
    )
    for replica in served:
        hit = _gauge(text, "penelope_cache_hit_ratio", replica)
        assert 0 < hit < 1
        assert _gauge(text, "penelope_recompute_ratio", replica) == 0
    assert f'penelope_tokens_total{{replica="{next(iter(served))}",source="device"}}' in text


def test_the_ingress_shows_what_its_router_routes_to(base_url: str) -> None:
    asyncio.run(run_sessions(base_url))  # the router exists once it has routed

    def view() -> list[dict[str, Any]]:
        return httpx.get(f"{base_url}/v1/penelope/router", timeout=30).json()["routers"]

    deadline = time.monotonic() + 30  # the digests reach the router every 0.5 s
    routers = view()
    while not any(rep["sessions"] for r in routers for rep in r["replicas"]):
        assert time.monotonic() < deadline, routers
        time.sleep(0.5)
        routers = view()
    assert all(r["policy"] == "affinity" for r in routers)
    seen = {rep["replica_id"] for r in routers for rep in r["replicas"]}
    assert seen == replicas_on_metrics(base_url)  # the fleet of two, by the same names


def _scrape_until(base_url: str, ready: Any, timeout_s: float = 30.0) -> str:
    """/metrics once `ready(text)` holds, or the last scrape when `timeout_s` has passed
    (the caller's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"{base_url}/metrics", timeout=30).text
        if ready(text) or time.monotonic() >= deadline:
            return text
        time.sleep(0.5)


def _token_totals(text: str) -> dict[str, float]:
    found = re.findall(r'penelope_tokens_total\{replica="([^"]+)",source="([^"]+)"\} (\S+)', text)
    return {f"{replica}/{source}": float(n) for replica, source, n in found}


def _settled_totals(base_url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """The token totals once 8 scrapes in a row (over both ingress replicas) agree."""
    deadline = time.monotonic() + timeout_s
    while True:
        scrapes = [
            _token_totals(httpx.get(f"{base_url}/metrics", timeout=30).text) for _ in range(8)
        ]
        if all(s == scrapes[0] for s in scrapes):
            return scrapes[0]
        assert time.monotonic() < deadline, f"scrapes never agreed: {scrapes}"
        time.sleep(0.5)


def test_metrics_are_exact_whichever_of_two_ingress_replicas_answers(base_url: str) -> None:
    """Each engine replica's report reaches one ingress replica; its routing stats reach
    every ingress's router. So every scrape (the proxy spreads them over both ingress
    replicas) shows the same totals, and they grow by exactly the prompt tokens served."""
    before = sum(_settled_totals(base_url).values())
    served = 0
    for i in range(6):
        body = {"model": MODEL, "prompt": [5 + i, 6, 7, 8, 9, 10], "max_tokens": 2}
        r = httpx.post(f"{base_url}/v1/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        served += r.json()["usage"]["prompt_tokens"]
    assert sum(_settled_totals(base_url).values()) - before == served


def test_hints_and_the_miss_ledger_through_the_proxy(base_url: str) -> None:
    """A harness's hints cross the ingress to the engine replica and come back granted (or
    clipped) in `usage.penelope`; the ledger's causes sum to the computed tokens; a bad hint
    is a 400 naming the field; /metrics counts the misses by cause."""
    sid = "session-hinted"  # other tests read every digest session as "session-*"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Run it."}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0}
    hints = {"expected_gap_s": 5, "retain_s": 3600}
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={**body, "penelope": hints},
        headers={"x-session-id": sid},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    p = r.json()["usage"]["penelope"]
    assert p["hints"]["expected_gap_s"]["granted"] == 5
    assert p["hints"]["retain_s"]["granted"] < 3600  # the tenant's longest pin (600 s)
    assert p["hints"]["retain_s"]["clipped_by"] == "tenant_pin_seconds"
    assert sum(p["miss_tokens"].values()) == p["recomputed_tokens"] + p["new_tokens"] > 0
    # after the reply: the session endpoint reaches the replica that holds the session (on
    # another it would be `no_session`)
    late = httpx.post(
        f"{base_url}/v1/penelope/sessions/{sid}", json={"expected_gap_s": 9}, timeout=60
    )
    assert late.status_code == 200, late.text
    assert late.json()["hints"]["expected_gap_s"] == {"asked": 9, "granted": 9, "clipped_by": None}
    bad = httpx.post(
        f"{base_url}/v1/chat/completions",
        json=body,
        headers={"x-session-id": sid, "x-penelope-retain-s": "-1"},
        timeout=60,
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-penelope-retain-s"
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    assert re.search(r'penelope_miss_tokens_total\{[^}]*cause="new"[^}]*\} [1-9]', text), text


def test_anthropic_messages_through_the_proxy(base_url: str) -> None:
    """/v1/messages takes the same path: Claude Code's session header routes both turns of
    each session to one replica (the second reads the first's prefix from its cache), and a
    bad block is a 400 in Anthropic's shape. The proxy keeps only `x-session-id` on one
    ingress replica, so a session's turns reach both, and the two routers agree through
    their placement board."""
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "run_tests", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "Run the tests."}],
    }
    headers = {"anthropic-version": "2023-06-01"}
    for n in range(SESSIONS):
        # other tests read every digest session as "session-*"
        headers["x-claude-code-session-id"] = f"session-claude-{n}"
        seen = []
        for _ in range(2):
            r = httpx.post(f"{base_url}/v1/messages", json=body, headers=headers, timeout=60)
            assert r.status_code == 200, r.text
            seen.append((r.headers["x-penelope-replica"], r.json()["usage"]))
        (first_replica, first), (second_replica, second) = seen
        assert first_replica == second_replica, n
        assert second["cache_read_input_tokens"] >= first["cache_creation_input_tokens"] - 4
        assert second["penelope"]["device_tokens"] == second["cache_read_input_tokens"]
    bad = {**body, "messages": [{"role": "user", "content": [{"type": "image"}]}]}
    r = httpx.post(f"{base_url}/v1/messages", json=bad, headers=headers, timeout=60)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["param"] == "messages[0].content[0]"


def test_responses_stateless_and_a_stored_chain_through_the_proxy(base_url: str) -> None:
    """/v1/responses takes the same path. Codex's way (`store: false`, the session in
    `prompt_cache_key`, the whole history resent) and a stored chain (`previous_response_id`,
    only the new item sent, whichever ingress replica reads it from the shared store): each
    turn after the first is served from the cache of the replica that served the one
    before."""
    ask = {"model": MODEL, "instructions": SYSTEM, "max_output_tokens": 2, "temperature": 0}

    def create(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        r = httpx.post(f"{base_url}/v1/responses", json={**ask, **body}, timeout=60)
        assert r.status_code == 200, r.text
        return r.headers["x-penelope-replica"], r.json()

    history: list[Any] = [{"role": "user", "content": "Run the tests."}]
    stateless = {"store": False, "prompt_cache_key": "session-codex"}  # a "session-*" name
    first_replica, first = create({**stateless, "input": history})
    history += [*first["output"], {"role": "user", "content": "Fix the failure."}]
    replica, again = create({**stateless, "input": history})
    assert replica == first_replica
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= (
        first["usage"]["input_tokens"] - 4
    )
    # the links name no session: each continues the session of the response it continues
    link_replica, link = create({"input": "Run the linter.", "prompt_cache_key": "session-chain"})
    for turn in range(3):  # the proxy spreads the links over both ingress replicas
        replica, nxt = create({"input": f"Fix lint error {turn}.", "previous_response_id":
                               link["id"]})  # fmt: skip
        assert replica == link_replica and nxt["previous_response_id"] == link["id"]
        usage = nxt["usage"]
        assert usage["input_tokens_details"]["cached_tokens"] >= link["usage"]["input_tokens"] - 4
        assert usage["penelope"]["device_tokens"] == usage["input_tokens_details"]["cached_tokens"]
        link = nxt


def test_replica_hooks_answer_inside_a_real_replica(base_url: str) -> None:
    engine = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app_name="penelope")
    signals = engine.options(method_name="record_autoscaling_stats").remote().result()
    assert set(signals) == {OCCUPANCY, WORKING_SET, RECOMPUTE}
    assert all(0.0 <= v <= 1.0 for v in signals.values())
    digest = decode_digest(engine.options(method_name="record_routing_stats").remote().result())
    assert all(s.startswith("session-") for s in digest.sessions)
    # ts and last_access share one clock: the sessions served above are minutes old at most
    assert all(0 <= digest.ts - h.last_access < 600 for h in digest.sessions.values())


def test_engines_publish_how_they_name_pages_for_the_ingress(base_url: str) -> None:
    """The ingress names each prompt's first pages for the router from this (`FirstPages`)."""
    engine = serve.get_deployment_handle(ENGINE_DEPLOYMENT, app_name="penelope")
    info = engine.options(method_name="describe").remote().result()
    assert info.page_naming is not None and info.page_naming.page_size == 4
    assert MODEL in info.page_naming.namespace


def test_health_models_and_errors_through_the_proxy(base_url: str) -> None:
    assert httpx.get(f"{base_url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"] == MODEL
    bad = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_p": 2}
    r = httpx.post(f"{base_url}/v1/chat/completions", json=bad)
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"
    long = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 10**6}
    assert httpx.post(f"{base_url}/v1/completions", json=long).status_code == 400
    # Refused by the engine replica itself: the error crosses Ray as a 400.
    r = httpx.post(f"{base_url}/v1/completions", json={"model": MODEL, "prompt": [10**7]})
    assert r.status_code == 400 and "token ids" in r.json()["error"]["message"]


def test_a_burst_past_every_replicas_queue_is_told_429_never_500(base_url: str) -> None:
    """Ray rejects what passes the engine deployment's `max_queued_requests` with
    BackPressureError; the client gets 429 with Retry-After, plain or streamed (Ray's
    `cancel()` of such a call raised the error again, which answered 500)."""

    async def one(client: httpx.AsyncClient, i: int) -> tuple[int, str | None]:
        body = {"model": MODEL, "prompt": [5 + i, 6, 7], "max_tokens": 48, "stream": i % 2 == 1}
        r = await client.post("/v1/completions", json=body, headers={"x-session-id": f"b{i}"})
        return r.status_code, r.headers.get("retry-after")

    async def burst() -> list[tuple[int, str | None]]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(48)))

    answers = asyncio.run(burst())
    statuses = sorted({status for status, _ in answers})
    assert set(statuses) <= {200, 429}, answers
    assert 429 in statuses and 200 in statuses, answers
    assert all(after for status, after in answers if status == 429), answers


def _gauge(text: str, name: str, replica: str) -> float:
    prefix = f'{name}{{replica="{replica}"}} '
    line = next(ln for ln in text.splitlines() if ln.startswith(prefix))
    return float(line[len(prefix) :])


def _replica_actor(tag: str) -> Any:
    """The Ray actor of the engine replica whose tag the ingress reported."""
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::") and a["name"].endswith(tag)
    ]
    assert len(names) == 1, names
    return ray.get_actor(names[0], namespace="serve")


def test_replica_killed_mid_stream_ends_the_stream_cleanly_and_the_session_goes_on(
    base_url: str,
) -> None:
    sid = "session-killed"
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Task: write a long report."},
    ]
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": 1800,
        "stream": True,
    }  # within the pool
    headers = {"x-session-id": sid}
    events: list[str] = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status_code == 200
            victim = r.headers["x-penelope-replica"]
            lines = r.iter_lines()
            for line in lines:  # wait until tokens flow, then kill the replica serving them
                if line.startswith("data: ") and '"content"' in line:
                    break
            ray.kill(_replica_actor(victim), no_restart=True)
            events = [ln for ln in lines if ln.startswith("data: ")]
        # the stream ends with an error event and [DONE], not a dropped connection
        assert events and events[-1] == "data: [DONE]", events[-3:]
        assert '"error"' in events[-2] and "replica" in events[-2], events[-2]
        # the session's next turn is served (by a live replica), recomputing what was lost
        body = {"model": MODEL, "messages": messages, "max_tokens": 4, "temperature": 0}
        for _ in range(60):
            r = client.post("/v1/chat/completions", json=body, headers=headers)
            if r.status_code == 200:
                break
            assert r.status_code == 503, r.text  # while Serve notices the dead replica
        assert r.status_code == 200, r.text
        assert r.headers["x-penelope-replica"] != victim
    # the dead replica leaves /metrics (it never said goodbye: after its reports' TTL)
    left = wait_for_replicas(base_url, lambda r: victim not in r, timeout_s=60)
    assert victim not in left, left
