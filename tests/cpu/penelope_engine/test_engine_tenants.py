"""Tenants share no cached page, except prefixes an operator declares public."""

from __future__ import annotations

from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams

SAMPLING = SamplingParams(max_tokens=1, ignore_eos=True)
SYSTEM = tuple(range(2000, 2012))  # 3 pages of 4 tokens
USER = tuple(range(3000, 3009))


def _engine(tiny_qwen3, public: tuple[tuple[int, ...], ...]) -> Engine:
    cache = CacheConfig(4, 128, policy="penelope", public_prefixes=public)
    return Engine(EngineConfig(cache=cache), loaded=tiny_qwen3)


def _cached(engine: Engine, rid: str, tenant: str, prompt: tuple[int, ...]) -> int:
    req = GenerateRequest(rid, prompt, SAMPLING, tenant=tenant)
    return engine.generate_sync(req).usage.device_tokens


def test_a_declared_public_prefix_is_shared_and_nothing_after_it(tiny_qwen3) -> None:
    engine = _engine(tiny_qwen3, public=(SYSTEM,))
    assert _cached(engine, "a1", "acme", SYSTEM + USER) == 0
    assert _cached(engine, "g1", "globex", SYSTEM + USER) == len(SYSTEM)  # not the user part
    assert _cached(engine, "a2", "acme", SYSTEM + USER) == len(SYSTEM + USER) // 4 * 4
    engine.check_integrity()


def test_without_a_declaration_tenants_share_nothing(tiny_qwen3) -> None:
    engine = _engine(tiny_qwen3, public=())
    assert _cached(engine, "a1", "acme", SYSTEM + USER) == 0
    assert _cached(engine, "g1", "globex", SYSTEM + USER) == 0


def test_a_prompt_that_only_resembles_the_public_prefix_shares_nothing(tiny_qwen3) -> None:
    engine = _engine(tiny_qwen3, public=(SYSTEM,))
    _cached(engine, "a1", "acme", SYSTEM + USER)
    altered = (SYSTEM[0] + 1,) + SYSTEM[1:] + USER
    assert _cached(engine, "g1", "globex", altered) == 0


def test_first_pages_from_the_published_naming_match_the_engine(make_engine) -> None:
    """The ingress names a prompt's first pages from `Engine.page_naming` alone; the ids
    are the ones the engine gives the same prompt (what router digests carry)."""
    from penelope_engine.cache.pages import FirstPages

    engine = make_engine()
    prompt = tuple(range(3, 60))
    req = GenerateRequest("first", prompt, SamplingParams(max_tokens=1), tenant="acme")
    seq = engine.add_request(req)
    assert FirstPages(engine.page_naming)(prompt, "acme", 8) == tuple(
        int(h) for h in seq.hashes[:8]
    )
    while engine.has_work():
        engine.step()
