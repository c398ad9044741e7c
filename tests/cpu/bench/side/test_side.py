"""`penelope bench side`'s pieces that need no Ray: the sessions, each set-up's Serve
options, the summary and table; and Ray Serve LLM's real `PrefixCacheAffinityRouter`
reading the prompt text of the request our ingress sends (`GenerateRequest.prompt`)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bench.side.cli import table
from bench.side.client import Record, summarize
from bench.side.config import (
    PENELOPE,
    POW2,
    RAY_PREFIX,
    RAY_PREFIX_ROUTER_CLASS,
    SideConfig,
    serve_args,
)
from bench.side.plan import build_plan, draw_workload, one_token_words
from bench.side.ray_app import build_setup_application, engine_deployment_options
from deployments.ray.builder import ENGINE_DEPLOYMENT, ROUTER_CLASS
from deployments.ray.serve_config import parse_serve_config
from penelope_engine.protocol import GenerateRequest

CFG = SideConfig(sessions=3, turns=3, max_tokens=8, max_think_s=2.0, window_tokens=2048)


def test_the_sessions_are_seeded_clipped_and_written_one_token_per_word() -> None:
    from penelope_engine.model.registry import qwen3_tokenizer

    tok = qwen3_tokenizer()
    wl = draw_workload(CFG)
    assert wl == draw_workload(CFG)  # every set-up replays the same sessions and starts
    assert len(wl.sessions) == 3 and wl.starts[0] == 0.0 and not wl.children
    plans = build_plan(wl, one_token_words(tok))
    for s, p in zip(wl.sessions, plans, strict=True):
        assert p.id == s.id and len(p.turns) == 3 and p.turns[0].think_s == 0.0
        for t in p.turns:
            assert len(tok.encode(t.prompt)) == t.prompt_tokens <= CFG.window_tokens
            assert t.max_tokens <= CFG.max_tokens and t.think_s <= CFG.max_think_s
    # the system-and-tools prefix follows the trace: sessions with the same prefix blocks
    # start with the same text, sessions with different ones do not
    heads: dict[tuple, set[str]] = {}
    for s, p in zip(wl.sessions, plans, strict=True):
        n = s.turns[0].shared_prefix_tokens
        assert n > 0
        key = tuple((b.kind, b.key) for b in s.prefix_blocks)
        heads.setdefault(key, set()).add(" ".join(p.turns[0].prompt.split()[:n]))
    assert all(len(texts) == 1 for texts in heads.values())
    firsts = [next(iter(texts)) for texts in heads.values()]
    assert len(set(firsts)) == len(firsts)  # different blocks, different texts


def test_each_ray_set_up_configures_only_the_engine_deployments_router() -> None:
    config = parse_serve_config(serve_args(CFG))
    pow2 = engine_deployment_options(POW2, config)
    assert "request_router_config" not in pow2  # Ray's own default router:
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter
    from ray.serve.config import RequestRouterConfig

    assert RequestRouterConfig().get_request_router_class() is PowerOfTwoChoicesRequestRouter
    assert pow2["num_replicas"] == CFG.replicas and pow2["name"] == ENGINE_DEPLOYMENT
    ray_prefix = engine_deployment_options(RAY_PREFIX, config)["request_router_config"]
    assert ray_prefix.request_router_class == RAY_PREFIX_ROUTER_CLASS
    real = pytest.importorskip(RAY_PREFIX_ROUTER_CLASS.split(":")[0])
    assert ray_prefix.get_request_router_class() is real.PrefixCacheAffinityRouter
    ours = engine_deployment_options(PENELOPE, config)["request_router_config"]
    assert ours.request_router_class == ROUTER_CLASS
    assert ours.request_router_kwargs["policy"] == "affinity"
    for setup in (POW2, RAY_PREFIX, PENELOPE):
        assert build_setup_application(setup, config) is not None  # binds without Ray
    with pytest.raises(ValueError):
        engine_deployment_options("sgl-router", config)
    with pytest.raises(ValueError):
        SideConfig(setups=("round-robin",))


def test_the_summary_counts_failures_and_the_table_shows_every_set_up() -> None:
    ok = [Record("s", k, "200", 0.1 * (k + 1), 0.5, 100, 50 * k, "r1") for k in range(3)]
    bad = Record("s", 3, "503", None, 0.2, None, None, "")
    e = summarize(PENELOPE, [*ok, bad])
    assert (e["requests"], e["failed"]) == (4, 1)
    assert e["mean_ttft_s"] == pytest.approx(0.2) and e["hit_ratio"] == pytest.approx(0.5)
    assert e["sessions_on_one_replica"] == 1 and e["statuses"] == {"200": 3, "503": 1}
    skipped = {"router": "sgl-router", "mean_ttft_s": None, "requests": 0, "skipped": "no python"}
    text = table({"setups": [e, skipped]})
    assert text.splitlines()[0].split() == [
        "router", "mean_ttft_s", "p90_ttft_s", "requests", "failed", "hit_ratio"
    ]  # fmt: skip
    assert text.splitlines()[1].split() == ["penelope", "0.2", "0.28", "4", "1", "0.5"]
    assert text.splitlines()[-1] == "sgl-router: no python"


def test_rays_prefix_router_reads_the_prompt_of_our_request() -> None:
    router_module = pytest.importorskip(RAY_PREFIX_ROUTER_CLASS.split(":")[0])
    from ray.serve._private.common import RequestMetadata
    from ray.serve.request_router import PendingRequest

    real = object.__new__(router_module.PrefixCacheAffinityRouter)
    first = GenerateRequest("r1", (5, 0xD7FF, 0xD800, 0xDFFF, 151_000), session_id="s")
    longer = GenerateRequest("r2", (*first.prompt_token_ids, 7, 8), session_id="s")

    async def text_of(request: GenerateRequest) -> str:
        ids = uuid.uuid4().hex
        metadata = RequestMetadata(request_id=ids, internal_request_id=ids, session_id="s")
        pending = PendingRequest(args=[request], kwargs={}, metadata=metadata)
        return str(real._extract_text_from_request(pending))

    a, b = asyncio.run(text_of(first)), asyncio.run(text_of(longer))
    assert a == first.prompt and len(a) == 5 and b.startswith(a) and len(b) == 7
    assert len(set(a)) == 5 and a.encode("utf-8")  # distinct ids, no surrogate characters
