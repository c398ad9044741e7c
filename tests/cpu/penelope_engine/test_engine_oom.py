"""A step that runs out of device memory fails the requests that do not fit alone, not its
batch: the others get the tokens a clean run gives them, and the cache stays whole.

A CPU has no CUDA out-of-memory error to provoke, so the tiny model runs inside a memory
budget counted in query tokens: a forward of more rows raises the error CUDA's caching
allocator raises (`torch.OutOfMemoryError`), before any layer runs."""

from __future__ import annotations

import torch
from torch import nn

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.errors import StepMemoryError
from penelope_engine.model.attention import AttentionMetadata
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.tiers.kv_pool import KVPool

SAMPLING = SamplingParams(max_tokens=3, ignore_eos=True)
SHORT = tuple(range(2000, 2010))
LONG = tuple(range(3000, 3060))


class MemoryBudget(nn.Module):
    """The real model, refusing any forward of more than `rows` query tokens."""

    def __init__(self, model: nn.Module, rows: int) -> None:
        super().__init__()
        self.model, self.rows, self.refused = model, rows, 0

    def forward(self, ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool) -> torch.Tensor:
        if ids.shape[0] > self.rows:
            self.refused += 1
            raise torch.OutOfMemoryError(f"CUDA out of memory: {ids.shape[0]} rows")
        return self.model(ids, meta, kv)


def _engine(loaded: LoadedModel) -> Engine:
    return Engine(EngineConfig(cache=CacheConfig(4, 64, policy="penelope")), loaded=loaded)


def _run(engine: Engine, reqs: list[GenerateRequest]) -> dict[str, object]:
    seqs = [engine.add_request(r) for r in reqs]
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    return {s.request_id: s.error or tuple(s.tokens[s.prompt_len :]) for s in seqs}


def test_only_the_request_that_does_not_fit_alone_fails(tiny_qwen3: LoadedModel) -> None:
    clean = _run(_engine(tiny_qwen3), [GenerateRequest("short", SHORT, SAMPLING)])
    budget = MemoryBudget(tiny_qwen3.model, rows=40)
    engine = _engine(LoadedModel(tiny_qwen3.config, budget, tiny_qwen3.tokenizer))
    got = _run(engine, [GenerateRequest("short", SHORT, SAMPLING),
                        GenerateRequest("long", LONG, SAMPLING)])  # fmt: skip
    assert budget.refused >= 2  # the batch of both, then the long one alone
    assert got["short"] == clean["short"]
    error = got["long"]
    assert isinstance(error, StepMemoryError) and "60 query tokens" in str(error)
    stats = engine.stats()
    assert stats.running == 0 and stats.request_pages == 0  # nothing held by the failed one
    # the engine goes on: the next request is served as before
    again = _run(engine, [GenerateRequest("again", SHORT, SAMPLING)])
    assert again["again"] == clean["short"]
