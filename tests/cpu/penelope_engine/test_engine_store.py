"""The Arrow store under the engine: a drained replica's sessions continue elsewhere."""

from __future__ import annotations

from pathlib import Path

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams

SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)
TURN1 = tuple(range(300, 341))
TURN2_NEW = tuple(range(700, 709))


def _engine(tiny_qwen3, store: Path | None) -> Engine:
    """Pages reach the store only by a drain here (no write-behind at turn end)."""
    uri = str(store) if store else None
    cache = CacheConfig(4, 64, 32, "penelope", store_uri=uri, write_behind_bytes=0)
    return Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)


def _turns(engine: Engine, other: Engine | None = None) -> tuple[tuple[int, ...], object]:
    first = engine.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    prompt2 = TURN1 + first.token_ids + TURN2_NEW
    second = (other or engine).generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    return first.token_ids + second.token_ids, second.usage


def test_a_session_moved_to_a_fresh_replica_loads_its_kv_from_the_store(tiny_qwen3, tmp_path):
    reference, _ = _turns(_engine(tiny_qwen3, None))
    leaving = _engine(tiny_qwen3, tmp_path)
    first = leaving.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    written = leaving.store.drain_to_store().pages
    assert written == leaving.inspect().core.cache._device.num_used  # every cached page, once
    assert leaving.store.drain_to_store().pages == 0
    arriving = _engine(tiny_qwen3, tmp_path)  # a new replica: empty tree, same store
    prompt2 = TURN1 + first.token_ids + TURN2_NEW
    second = arriving.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    arriving.check_integrity()
    assert first.token_ids + second.token_ids == reference
    assert second.usage.store_tokens >= 40  # the history came back from the store
    assert second.usage.recomputed_tokens == 0


def test_a_corrupt_store_file_is_recomputed_not_trusted(tiny_qwen3, tmp_path):
    reference, _ = _turns(_engine(tiny_qwen3, None))
    leaving = _engine(tiny_qwen3, tmp_path)
    first = leaving.generate_sync(GenerateRequest("t1", TURN1, SAMPLING, "agent"))
    assert leaving.store.drain_to_store().pages > 0
    for f in tmp_path.rglob("*.arrow"):
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0xFF
        f.write_bytes(bytes(data))
    arriving = _engine(tiny_qwen3, tmp_path)
    prompt2 = TURN1 + first.token_ids + TURN2_NEW
    second = arriving.generate_sync(GenerateRequest("t2", prompt2, SAMPLING, "agent"))
    assert first.token_ids + second.token_ids == reference
    assert second.usage.store_tokens == 0
    assert arriving._store is not None and arriving._store.stats().corrupt > 0
