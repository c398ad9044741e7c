"""The embedded engine on CUDA in bf16: greedy outputs equal across cache set-ups.

The seeded random-weight tiny Qwen3 (`tiny-qwen3`) in bf16 on the GPU serves the
same agent-like workload (a shared prefix, growing private histories, sessions
interleaved) three ways:

- `roomy`: a device pool that holds every session (nothing is evicted);
- `holes`: a pool a third of that, no host tier: the coldest sessions lose the
  front of their history, recomputed on return (`recomputed_tokens` > 0);
- `host`: the same small pool over a host tier: fronts go to the host and come
  back from it (`host_tokens` > 0).

Every turn's greedy tokens must be identical in the three runs, and each tight
run must have exercised what it names. One JSON line (`PENELOPE ...`) reports
the reuse counters. The runs attend with CUDA's default backend, `flex`
(FlexAttention over the page table); the roomy run again with the reference,
`sdpa`, must give the same tokens (bf16: the guarantee README states is the one
measured here). A pool sized by `device_memory_fraction` holds its budget
through a step of the largest size. Skipped without CUDA (run by
tests/gpu/run_gpu_checks.sh).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from penelope_engine.config import CacheConfig, EngineConfig  # noqa: E402
from penelope_engine.engine import Engine  # noqa: E402
from penelope_engine.model.registry import LoadedModel, load_model  # noqa: E402
from penelope_engine.protocol import GenerateRequest, SamplingParams  # noqa: E402

PAGE = 16
SESSIONS, TURNS, SHARED_LEN, TURN_LEN, NEW_TOKENS = 6, 4, 128, 96, 8
ROOMY_PAGES = 512  # 8192 tokens: every session's whole history
TIGHT_PAGES = 112  # 1792 tokens: about two thirds of what the sessions hold (~164 pages)
HOST_PAGES = 512
SAMPLING = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def bf16_qwen3() -> LoadedModel:
    return load_model("tiny-qwen3", "bfloat16", "cuda")


def run(
    loaded: LoadedModel, device_pages: int, host_pages: int, attention: str = "auto"
) -> tuple[list[Any], dict]:
    cache = CacheConfig(PAGE, device_pages, host_pages, "penelope")
    config = EngineConfig(device="cuda", dtype="bfloat16", cache=cache, attention=attention)
    engine = Engine(config, loaded=loaded)
    vocab = loaded.config.vocab_size
    rng = random.Random(0)
    shared = [rng.randrange(3, vocab) for _ in range(SHARED_LEN)]
    histories = [list(shared) for _ in range(SESSIONS)]
    outputs: list[tuple[int, ...]] = []
    totals = {"device": 0, "host": 0, "recomputed": 0, "new": 0}
    for t in range(TURNS):
        for s in rng.sample(range(SESSIONS), SESSIONS):
            histories[s] += [rng.randrange(3, vocab) for _ in range(TURN_LEN)]
            req = GenerateRequest(f"t{t}-s{s}", tuple(histories[s]), SAMPLING, f"s{s}")
            out = engine.generate_sync(req)
            outputs.append(out.token_ids)
            histories[s] += out.token_ids
            u = out.usage
            totals["device"] += u.device_tokens
            totals["host"] += u.host_tokens
            totals["recomputed"] += u.recomputed_tokens
            totals["new"] += u.new_tokens
    engine.check_integrity()
    return outputs, totals


def test_bf16_greedy_outputs_are_equal_with_holes_and_host_loads(bf16_qwen3: LoadedModel) -> None:
    roomy, roomy_use = run(bf16_qwen3, ROOMY_PAGES, 0)
    holes, holes_use = run(bf16_qwen3, TIGHT_PAGES, 0)
    host, host_use = run(bf16_qwen3, TIGHT_PAGES, HOST_PAGES)
    report = {"check": "embedded-bf16", "roomy": roomy_use, "holes": holes_use, "host": host_use}
    same = {"holes": holes == roomy, "host": host == roomy}
    print("PENELOPE " + json.dumps({**report, "identical": same}))
    assert all(len(t) == NEW_TOKENS for t in roomy)
    assert roomy_use["recomputed"] == 0, "the roomy pool evicted: it is not a baseline"
    assert holes_use["recomputed"] > 0, "the tight pool made no hole: nothing was checked"
    assert host_use["host"] > 0, "no page came back from the host tier: nothing was checked"
    first = [
        next((i for i, (a, b) in enumerate(zip(roomy, o)) if a != b), None) for o in (holes, host)
    ]
    assert holes == roomy, f"holes: first differing turn {first[0]}"
    assert host == roomy, f"host loads: first differing turn {first[1]}"


def test_bf16_flex_gives_the_reference_backends_tokens(bf16_qwen3: LoadedModel) -> None:
    flex, _ = run(bf16_qwen3, TIGHT_PAGES, 0, "flex")
    sdpa, _ = run(bf16_qwen3, TIGHT_PAGES, 0, "sdpa")
    differ = [i for i, (a, b) in enumerate(zip(flex, sdpa)) if a != b]
    print("PENELOPE " + json.dumps({"check": "flex-vs-sdpa", "turns": len(flex),
                                    "differing_turns": differ}))  # fmt: skip
    assert not differ, f"flex and sdpa differ at turns {differ}"


def test_a_pool_sized_to_the_gpu_holds_its_budget(bf16_qwen3: LoadedModel) -> None:
    fraction = 0.3
    cache = CacheConfig(PAGE, device_memory_fraction=fraction)
    config = EngineConfig(device="cuda", dtype="bfloat16", cache=cache)
    engine = Engine(config, loaded=bf16_qwen3)
    plan = engine.memory_plan
    assert plan is not None and engine.config.cache.device_pages == plan.pages > 0
    torch.cuda.reset_peak_memory_stats()
    prompt = tuple(range(3, 3 + engine.config.scheduler.max_batch_tokens))
    engine.generate_sync(GenerateRequest("big", prompt, SAMPLING))
    free, total = torch.cuda.mem_get_info()
    print("PENELOPE " + json.dumps({"check": "pool-sized", "pages": plan.pages,
                                    "step_peak": plan.step_peak, "used": total - free,
                                    "budget": int(fraction * total)}))  # fmt: skip
    assert total - free <= fraction * total + plan.page_bytes
