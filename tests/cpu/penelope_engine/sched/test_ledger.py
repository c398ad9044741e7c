"""The miss ledger: every computed prompt token gets exactly one cause, on many turns that
evict (device only, a small host tier, a store), and the causes name what happened."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, MissTokens, SamplingParams, TokenUsage

SAMPLING = SamplingParams(max_tokens=2, ignore_eos=True)


def run_turns(e: Engine, sessions: int = 5, turns: int = 4, seed: int = 0) -> list[TokenUsage]:
    """Agent sessions sharing a 12-token prefix, 20 private tokens, 6 more per turn; every
    third turn of session 0 edits its history."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 5000, 12).tolist()
    history = {s: shared + rng.integers(0, 5000, 20).tolist() for s in range(sessions)}
    out = []
    for t in range(turns):
        for s in range(sessions):
            prompt = history[s]
            if s == 0 and t == 2:
                prompt = prompt[:16] + rng.integers(0, 5000, len(prompt) - 16).tolist()
            req = GenerateRequest(f"{s}-{t}", tuple(prompt), SAMPLING, f"s{s}", "default")
            result = e.generate_sync(req)
            e.check_integrity()
            u = result.usage
            assert u.misses.total == u.recomputed_tokens + u.new_tokens, (req.request_id, u)
            out.append(u)
            history[s] = prompt + list(result.token_ids) + rng.integers(0, 5000, 6).tolist()
    return out


@pytest.mark.parametrize("policy", ["lru", "penelope", "greedydual", "return_aware"])
@pytest.mark.parametrize("tiers", ["device", "host", "store"])
def test_causes_sum_to_the_computed_tokens_on_every_request(
    tiny_qwen3: LoadedModel, tmp_path: Path, policy: str, tiers: str
) -> None:
    host = 8 if tiers != "device" else 0
    store = str(tmp_path / "store") if tiers == "store" else None
    cc = CacheConfig(4, 24, host, policy, store_uri=store, store_bytes=1 << 20)
    e = Engine(EngineConfig(cache=cc), loaded=tiny_qwen3)
    usages = run_turns(e)
    total = sum(usages, TokenUsage())
    assert e.stats().tokens.misses == total.misses
    assert total.misses.total == total.recomputed_tokens + total.new_tokens
    misses = total.misses.as_dict()
    assert misses["prompt_edit"] > 0  # session 0's edited turn
    lost = misses["evicted_device"] + misses["dropped_host"] + misses["store_miss"]
    if tiers == "store":  # what leaves the host is spilled, and found again
        assert total.store_tokens > 0
    else:  # 5 sessions in 24 device pages: evictions
        assert lost + misses["recompute_cheaper"] > 0
    if tiers == "device":
        assert misses["dropped_host"] == misses["store_miss"] == 0
    else:
        assert misses["evicted_device"] == 0


def test_pages_the_store_lost_are_store_misses(tiny_qwen3: LoadedModel, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cc = CacheConfig(4, 24, 8, store_uri=str(store), write_behind_bytes=0)
    e = Engine(EngineConfig(cache=cc), loaded=tiny_qwen3)
    first = tuple(range(100, 140))
    a = e.generate_sync(GenerateRequest("a1", first, SAMPLING, "a"))
    for i in range(4):  # others push a's pages off the device and the host, into the store
        e.generate_sync(
            GenerateRequest(
                f"o{i}", tuple(range(1000 * (i + 1), 1000 * (i + 1) + 40)), SAMPLING, f"o{i}"
            )
        )
    for f in store.rglob("*.arrow"):
        f.unlink()
    back = e.generate_sync(GenerateRequest("a2", first + a.token_ids + (7, 8), SAMPLING, "a"))
    u = back.usage
    assert u.store_tokens == 0 and u.misses == MissTokens(new=4, store_miss=40)


def test_a_prompt_edit_is_reported_where_it_happened(tiny_qwen3: LoadedModel) -> None:
    e = Engine(EngineConfig(cache=CacheConfig(4, 128)), loaded=tiny_qwen3)
    first = tuple(range(100, 140))
    e.generate_sync(GenerateRequest("1", first, SAMPLING, "s"))
    out = e.generate_sync(GenerateRequest("2", first[:24] + tuple(range(900, 930)), SAMPLING, "s"))
    assert out.prompt_edit_at == 24
    # pages 6..9 of the last path (16 tokens) changed; the rest past it is new
    assert out.usage.misses == MissTokens(new=14, prompt_edit=16)


def test_a_session_id_from_another_tenant_is_a_tenant_miss(tiny_qwen3: LoadedModel) -> None:
    e = Engine(EngineConfig(cache=CacheConfig(4, 128)), loaded=tiny_qwen3)
    prompt = tuple(range(100, 140))
    e.generate_sync(GenerateRequest("1", prompt, SAMPLING, "s", "alpha"))
    out = e.generate_sync(GenerateRequest("2", prompt + (7, 8, 9, 10), SAMPLING, "s", "beta"))
    assert out.usage.device_tokens == 0 and out.prompt_edit_at is None
    assert out.usage.misses.tenant == 40 and out.usage.misses.new == 4


def test_history_without_a_record_here_is_a_moved_replica_miss(tiny_qwen3: LoadedModel) -> None:
    e = Engine(EngineConfig(cache=CacheConfig(4, 128)), loaded=tiny_qwen3)
    prompt = tuple(range(100, 142))
    moved = e.generate_sync(GenerateRequest("1", prompt, SAMPLING, "s", has_history=True))
    assert moved.usage.misses == MissTokens(new=2, moved_replica=40)
    fresh = e.generate_sync(GenerateRequest("2", tuple(range(500, 542)), SAMPLING, "t"))
    assert fresh.usage.misses == MissTokens(new=42)
