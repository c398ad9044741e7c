"""AsyncEngine: the async-generator interface over the step loop on its own thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from penelope_engine.async_engine import AsyncEngine
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.errors import EngineError, InvalidRequestError
from penelope_engine.protocol import (
    DrainReport,
    EngineProtocol,
    GenerateRequest,
    RequestOutput,
    SamplingParams,
)

CONFIG = EngineConfig(cache=CacheConfig(page_size=4, device_pages=64))
PROMPT = tuple(range(3000, 3021))


def request(rid: str, max_tokens: int, prompt: tuple[int, ...] = PROMPT) -> GenerateRequest:
    return GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def held_by_requests(engine: AsyncEngine) -> int:
    """Device pages in use that the tree does not hold (read on the engine's lock)."""
    with engine._reading():
        cache = engine.engine.inspect().core.cache
        return cache._device.num_used - sum(n.n_device for n in cache._tree.iter_nodes())


def test_streaming_yields_the_same_tokens_as_a_sync_run(tiny_qwen3) -> None:
    expected = Engine(CONFIG, loaded=tiny_qwen3).generate_sync(request("sync", 5)).token_ids

    async def main() -> list[RequestOutput]:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        try:
            return [out async for out in engine.generate(request("stream", 5))]
        finally:
            engine.check_integrity()
            await engine.shutdown()

    outs = asyncio.run(main())
    assert tuple(t for out in outs for t in out.token_ids) == expected
    assert all(out.token_ids for out in outs) and len(outs) > 1
    assert outs[-1].finished and outs[-1].finish_reason == "length"
    assert not any(out.finished for out in outs[:-1])
    usage = outs[-1].usage
    assert usage.prompt_tokens == len(PROMPT) and usage.completion_tokens == 5
    assert outs[-1].ttft_s is not None and outs[-1].ttft_s >= 0


def test_cancelling_the_consumer_aborts_and_frees_pages(tiny_qwen3) -> None:
    async def main() -> tuple[int, int, int]:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in engine.generate(request("long", 500)):
                first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 30)
        during = held_by_requests(engine)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The step thread applies the abort at its next step boundary (the event
        # loop never waits for a forward pass), so allow one step's time.
        for _ in range(100):
            after = held_by_requests(engine)
            if after == 0:
                break
            await asyncio.sleep(0.05)
        engine.check_integrity()
        running = engine.stats().running
        await engine.shutdown()
        return during, after, running

    during, after, running = asyncio.run(main())
    assert during > 0
    assert after == 0 and running == 0


def test_a_bad_request_raises_before_the_first_output(tiny_qwen3) -> None:
    async def main() -> None:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        try:
            with pytest.raises(InvalidRequestError, match="empty"):
                await engine.generate(request("bad", 3, ())).__anext__()
            engine.check_integrity()
            assert engine.stats().running == 0
        finally:
            await engine.shutdown()

    asyncio.run(main())


def test_a_stuck_step_loop_fails_shutdown_with_its_stack(tiny_qwen3) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck_step() -> list:
        entered.set()
        release.wait(60)
        return []

    async def main() -> None:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        engine.engine.has_work = lambda: True  # type: ignore[method-assign]
        engine.engine.step = stuck_step  # type: ignore[method-assign]
        assert await asyncio.to_thread(entered.wait, 10)
        t0 = time.monotonic()
        try:
            with pytest.raises(EngineError, match="did not stop within 0.5 s") as info:
                await engine.shutdown(timeout_s=0.5)
            assert "stuck_step" in str(info.value) and time.monotonic() - t0 < 5
        finally:
            release.set()
        await engine.shutdown()  # released: it stops

    asyncio.run(main())


def test_it_answers_every_member_of_the_engine_protocol(tiny_qwen3) -> None:
    async def main() -> None:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        try:
            members = [n for n in vars(EngineProtocol) if not n.startswith("_")]
            assert "vocab_size" in members and "drain_to_store" in members
            assert [n for n in members if not hasattr(engine, n)] == []
            assert engine.vocab_size == tiny_qwen3.config.vocab_size
            window = min(tiny_qwen3.config.max_position, 64 * 4)  # the pool holds less
            assert engine.max_model_len == window and engine.alive
            assert engine.store_stats() is None and engine.drain_to_store() == DrainReport()
            assert await engine.abort("nobody") is False
            assert engine.session_digests() == [] and engine.shared_prefix_hashes() == []
            engine.check_integrity()
        finally:
            await engine.shutdown()

    asyncio.run(main())
