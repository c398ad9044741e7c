"""What a grammar costs a decode step: the same batch, every row free vs every row constrained.

An engine in this process (the bench's `--model`, one thread) runs `batch`
decoding requests for `steps` steps, free, then the same under a JSON-schema
grammar each (an array of at least `steps` integers, so that no row can close
it early; `deployments.api.tools.constraint`'s JSON style), `repeats` times,
alternating. Only steps in which all `batch` requests decode count. The figures:
the median step time of each (ms) and their ratio, constrained / plain (1.0:
free). The difference is llguidance's mask per row and its application
(`penelope_engine.grammar`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import llguidance

from bench.speed.config import SpeedConfig
from deployments.api.tools.constraint import JSON_STYLE
from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.protocol import GenerateRequest, SamplingParams


def _step_times(engine: Any, cfg: SpeedConfig, grammar: str | None, run: int) -> list[float]:
    from bench.speed.measure import prompt

    for i in range(cfg.batch):
        ids = prompt(cfg, cfg.decode_prompt_tokens, "constrained", run, grammar is None, i)
        sampling = SamplingParams(max_tokens=cfg.constrained_steps + 1)
        engine.add_request(GenerateRequest(f"c{run}-{i}-{grammar is None}", tuple(ids), sampling,
                                           grammar=grammar))  # fmt: skip
    times = []
    while engine.has_work():
        running = engine.inspect().core.scheduler.running
        decoding = len(running) == cfg.batch and not any(s.in_prefill for s in running)
        t0 = time.perf_counter()
        engine.step()
        if decoding:
            times.append(time.perf_counter() - t0)
    return times


def constrained_step_cost(cfg: SpeedConfig) -> dict[str, Any]:
    """Median decode-step milliseconds, free vs constrained, and their ratio."""
    import torch

    from penelope_engine.engine import Engine

    torch.set_num_threads(1)
    engine = Engine(
        EngineConfig(
            model=cfg.model,
            dtype=cfg.dtype,
            cache=CacheConfig(page_size=cfg.page_size, device_pages=cfg.device_pages),
            scheduler=SchedulerConfig(max_running=cfg.batch),
        )
    )
    integers = {"type": "array", "items": {"type": "integer"}, "minItems": cfg.constrained_steps}
    grammar = llguidance.LLMatcher.grammar_from_json_schema(integers, overrides=JSON_STYLE)  # type: ignore[arg-type]
    engine.warm_grammars()
    plain: list[float] = []
    constrained: list[float] = []
    for run in range(cfg.repeats):
        order = [(plain, None), (constrained, grammar)]
        for into, g in order if run % 2 == 0 else order[::-1]:
            into += _step_times(engine, cfg, g, run)
    if not plain or not constrained:
        raise RuntimeError("no step ran the whole batch decoding: raise --constrained-steps")
    p, c = statistics.median(plain) * 1e3, statistics.median(constrained) * 1e3
    return {
        "batch": cfg.batch,
        "plain_step_ms": round(p, 3),
        "constrained_step_ms": round(c, 3),
        "ratio": round(c / p, 3),
        "steps": {"plain": len(plain), "constrained": len(constrained)},
    }
