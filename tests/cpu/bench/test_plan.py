"""The seeded text sessions `bench faults` and `bench cluster` replay (`bench.plan`)."""

from __future__ import annotations

from bench.plan import PlanConfig, build_plan, draw_workload, one_token_words

CFG = PlanConfig(sessions=3, turns=3, max_tokens=8, max_think_s=2.0, window_tokens=2048)


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
