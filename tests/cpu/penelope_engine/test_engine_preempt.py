"""Out of pages mid-decode: the newest sequence is preempted, resumes, and stays exact."""

from __future__ import annotations

from collections.abc import Callable

from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams

LONG = SamplingParams(max_tokens=12, ignore_eos=True)


def test_preempted_sequences_resume_with_the_same_tokens(
    make_engine: Callable[..., Engine],
) -> None:
    prompts = [tuple(range(100 + 40 * i, 120 + 40 * i)) for i in range(3)]
    solo = [
        make_engine(device_pages=64).generate_sync(GenerateRequest(f"s{i}", p, LONG)).token_ids
        for i, p in enumerate(prompts)
    ]
    # Each request needs 8 pages of 4 tokens by its end; 16 pages cannot hold all three.
    engine = make_engine(device_pages=16)
    seqs = [engine.add_request(GenerateRequest(f"r{i}", p, LONG)) for i, p in enumerate(prompts)]
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert all(s.error is None and s.finish_reason == "length" for s in seqs)
    assert [tuple(s.tokens[s.prompt_len :]) for s in seqs] == solo
    assert sum(s.preemptions for s in seqs) > 0, "the pool was large enough: no test"
