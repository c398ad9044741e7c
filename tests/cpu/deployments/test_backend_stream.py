"""`stream_with_abort`: a request's last output goes out as its step ends, stats and all."""

from __future__ import annotations

import asyncio
import threading
import time

from deployments.api.backend import ReplicaOutput, stream_with_abort
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.protocol import GenerateRequest, SamplingParams

CONFIG = EngineConfig(cache=CacheConfig(page_size=4, device_pages=64))
HOLD_S = 10.0  # how long the next step waits for the finished request's last output


def request(rid: str, n: int, max_tokens: int) -> GenerateRequest:
    prompt = tuple(range(3000 + n, 3000 + 2 * n))
    return GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def test_the_last_output_does_not_wait_for_the_next_step(tiny_qwen3) -> None:
    """A finishes in one step while B is queued; B's step then holds the engine until A's
    last output (with its stats) has reached the consumer, or HOLD_S. The last output
    must not wait on that step, as it did when it read `engine.stats` under its lock."""
    b_posted, a_delivered = threading.Event(), threading.Event()
    waits: list[float] = []

    async def main() -> tuple[list[ReplicaOutput], list[ReplicaOutput]]:
        engine = AsyncEngine(CONFIG, loaded=tiny_qwen3)
        run = engine.engine._runner.run

        def held_run(items):  # type: ignore[no-untyped-def]
            ids = {it.seq.request_id for it in items}
            if ids == {"a"}:  # B arrives while A's only step runs
                assert b_posted.wait(HOLD_S)
            if "b" in ids and not waits:  # B's first step: wait for A's last output
                t0 = time.monotonic()
                a_delivered.wait(HOLD_S)
                waits.append(time.monotonic() - t0)
            return run(items)

        engine.engine._runner.run = held_run  # type: ignore[method-assign]

        async def consume(req: GenerateRequest) -> list[ReplicaOutput]:
            outs = []
            async for item in stream_with_abort(engine, req, "r0"):
                outs.append(item)
                if item.output.finished and req.request_id == "a":
                    a_delivered.set()
            return outs

        try:
            a = asyncio.create_task(consume(request("a", 21, 1)))
            await asyncio.sleep(0.2)  # A is in its step
            b = asyncio.create_task(consume(request("b", 40, 3)))
            await asyncio.sleep(0.2)  # B is posted to the engine's inbox
            b_posted.set()
            outs = await asyncio.wait_for(asyncio.gather(a, b), 3 * HOLD_S)
            engine.check_integrity()
            return outs[0], outs[1]
        finally:
            await engine.shutdown()

    a_outs, b_outs = asyncio.run(main())
    assert waits and waits[0] < HOLD_S / 2, f"A's last output waited for B's step: {waits}"
    last = a_outs[-1]
    assert last.output.finished and last.stats is not None
    assert last.stats.tokens.prompt_tokens >= 21  # the snapshot counts A's prompt
    assert [o.stats is not None for o in a_outs] == [o.output.finished for o in a_outs]
    assert b_outs[-1].output.finished and b_outs[-1].stats is not None
    assert b_outs[-1].stats.tokens.prompt_tokens == 21 + 40
