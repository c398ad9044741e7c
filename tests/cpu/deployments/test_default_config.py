"""The embedded default (`serve_config.yaml`) shows the whole design: device, host tier, store."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import pytest
import yaml
from deploy_testkit import open_client

from bench.sim.setups import CACHES
from cache_store.files import resolve_uri
from deployments.api.standalone import standalone_app
from deployments.ray.serve_config import parse_serve_config
from penelope_engine.config import EngineConfig
from penelope_engine.shipped import (
    CPU_STARVATION_S,
    SHIPPED_AGENT,
    SHIPPED_POLICY,
    shipped_scheduler,
)

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.anyio


def default_engine() -> EngineConfig:
    doc = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    engine = parse_serve_config(doc["applications"][0]["args"]).engine
    assert isinstance(engine, EngineConfig)
    return engine


def test_the_default_turns_on_the_host_tier_and_a_local_store_with_a_budget() -> None:
    cache = default_engine().cache
    assert cache.host_pages >= cache.device_pages > 0
    assert cache.write_policy == "write_through"
    assert cache.store_uri == "~/.cache/penelope/store" and 0 < cache.store_bytes <= 8 << 30


def test_the_default_runs_what_the_benchmarks_measure() -> None:
    """serve_config.yaml deploys Penelope as `bench`'s `penelope` runs it (`shipped`): on its
    CPU, the CPU's schedule (`bench versus` measures it); the simulated GPU's otherwise."""
    engine = default_engine()
    sched, spec = engine.scheduler, CACHES["penelope"]
    assert engine.device == "cpu"
    assert sched == shipped_scheduler(sched.max_batch_tokens, sched.max_running, device="cpu")
    assert engine.cache.policy == spec.policy == SHIPPED_POLICY
    assert spec.agent == SHIPPED_AGENT and spec.max_prefills == 0
    assert sched.agent == dataclasses.replace(
        SHIPPED_AGENT, admission="shortest", starvation_s=CPU_STARVATION_S
    )
    assert sched.max_batch_tokens * spec.prefill_chunk == sched.prefill_chunk * spec.step_tokens
    assert sched.solo_prefill_chunk == sched.max_batch_tokens  # alone: the whole step
    assert spec.solo_prefill_chunk == spec.step_tokens
    assert engine.cache.host_pages > 0 and spec.tiers == "gpu+cpu"


def test_a_local_store_path_is_expanded_where_it_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/agent")
    monkeypatch.setenv("STATE", "/srv/state")
    assert resolve_uri("~/.cache/penelope/store") == "/home/agent/.cache/penelope/store"
    assert resolve_uri("$STATE/store") == "/srv/state/store"
    assert resolve_uri("s3://bucket/prefix") == "s3://bucket/prefix"


async def test_long_sessions_on_the_default_shape_use_every_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default's cache, scaled to the tiny model: device tokens, host tokens, store tokens.

    HOME is a fresh directory, so the state directory does not exist before the
    first spill: the store creates it on first use.
    """
    monkeypatch.setenv("HOME", str(tmp_path))
    default = default_engine()
    cache = dataclasses.replace(default.cache, device_pages=64, host_pages=128)
    engine = dataclasses.replace(default, model="tiny-qwen3", cache=cache)
    rng = random.Random(0)
    history = {f"agent-{i}": [rng.randrange(10, 5000) for _ in range(16)] for i in range(4)}
    seen = {"device_tokens": 0, "host_tokens": 0, "store_tokens": 0}
    async for client in open_client(standalone_app(engine)):
        for _turn in range(3):
            # Each session's turn is a user message then a quick tool result (16 tokens).
            for (sid, tokens), new in itertools.product(history.items(), (240, 16)):
                tokens += [rng.randrange(10, 5000) for _ in range(new)]
                body = {"model": "tiny-qwen3", "prompt": tokens, "max_tokens": 2}
                r = await client.post("/v1/completions", json=body, headers={"x-session-id": sid})
                assert r.status_code == 200, r.text
                usage = r.json()["usage"]
                parts = usage["penelope"]
                sources = ("device", "host", "store", "recomputed", "new")
                assert sum(parts[f"{k}_tokens"] for k in sources) == usage["prompt_tokens"]
                for k in seen:
                    seen[k] += parts[k]
        metrics = (await client.get("/metrics")).text
    assert all(v > 0 for v in seen.values()), seen
    store_line = next(
        line
        for line in metrics.splitlines()
        if line.startswith("penelope_tokens_total") and 'source="store"' in line
    )
    assert float(store_line.rsplit(" ", 1)[1]) == seen["store_tokens"]
    assert (tmp_path / ".cache/penelope/store").is_dir()
