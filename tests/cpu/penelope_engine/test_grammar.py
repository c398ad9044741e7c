"""Grammars in the one sampler: a request's mask is its own; the rest of the batch and the
cache never see it; its turn ends as a tool turn when its reply made a call."""

from __future__ import annotations

import json
from collections.abc import Callable

import jsonschema
import llguidance
import pytest

from penelope_engine.engine import Engine
from penelope_engine.errors import InvalidRequestError
from penelope_engine.protocol import GenerateRequest, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
GREEDY = SamplingParams(max_tokens=40)


def _schema_grammar() -> str:
    """SCHEMA with no free whitespace (random weights would fill max_tokens with it)."""
    compact = {"whitespace_flexible": False}
    return llguidance.LLMatcher.grammar_from_json_schema(SCHEMA, overrides=compact)  # type: ignore[arg-type]


def _run(engine: Engine, requests: list[GenerateRequest]) -> dict[str, list[int]]:
    """Every request added at once (one batch), stepped to the end; completion ids by request."""
    for r in requests:
        engine.add_request(r)
    done: dict[str, list[int]] = {}
    for _ in range(500):
        for seq in engine.step():
            if seq.finish_reason is not None:
                done[seq.request_id] = seq.tokens[seq.prompt_len :]
        if not engine.has_work():
            break
    engine.check_integrity()
    return done


def _prompt(engine: Engine, text: str) -> tuple[int, ...]:
    return tuple(engine.tokenizer.encode(text))


def _text(engine: Engine, ids: list[int]) -> str:
    return engine.tokenizer.decode(ids)


def test_a_constrained_request_in_a_mixed_batch_leaves_the_others_unchanged(
    make_engine: Callable[..., Engine],
) -> None:
    alone, mixed = make_engine(), make_engine()
    free = [
        GenerateRequest("a", _prompt(alone, "The weather today is"), GREEDY),
        GenerateRequest("c", _prompt(alone, "Plan a trip to"), SamplingParams(40, 1.0, seed=3)),
    ]
    grammar = _schema_grammar()
    constrained = [
        GenerateRequest("b", _prompt(mixed, "The weather today is"), GREEDY, grammar=grammar),
        GenerateRequest("d", _prompt(mixed, "x"), SamplingParams(60, 1.0, seed=5), grammar=grammar),
    ]
    want = _run(alone, free)
    got = _run(mixed, [free[0], constrained[0], free[1], constrained[1]])
    assert got["a"] == want["a"] and got["c"] == want["c"]  # greedy and seeded: exact
    for rid in ("b", "d"):
        jsonschema.validate(json.loads(_text(mixed, got[rid])), SCHEMA)
    assert got["b"] != got["a"]  # the grammar did steer it (random weights never write JSON)


def test_the_grammar_does_not_touch_the_cache(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    prompt = _prompt(engine, "A long shared system prompt about tools. " * 6)
    grammar = _schema_grammar()
    _run(engine, [GenerateRequest("warm", prompt, GREEDY, session_id="s")])
    seqs = [engine.add_request(GenerateRequest("g", prompt, GREEDY, grammar=grammar))]
    seqs.append(engine.add_request(GenerateRequest("f", prompt, GREEDY)))
    while engine.has_work():
        engine.step()
    engine.check_integrity()
    assert seqs[0].usage == seqs[1].usage and seqs[0].usage.device_tokens > 0


def test_a_grammar_llguidance_rejects_is_an_invalid_request_that_queues_nothing(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    bad = llguidance.LLMatcher.grammar_from_lark("start: undefined_rule")
    with pytest.raises(InvalidRequestError, match="grammar"):
        engine.add_request(GenerateRequest("x", _prompt(engine, "hi"), GREEDY, grammar=bad))
    assert not engine.has_work() and engine.stats().queue_length == 0


@pytest.mark.parametrize(
    ("lark", "stop"),
    [
        ('start: "Let me look. " <tool_call> "{}" </tool_call>', "tool_use"),
        ('start: "The answer is 42."', "end_turn"),
    ],
)
def test_a_reply_that_made_a_call_ends_a_tool_turn(
    make_engine: Callable[..., Engine], lark: str, stop: str
) -> None:
    """The served path's signal for return-aware retention: the reply itself says."""
    engine = make_engine()
    req = GenerateRequest(
        "t",
        _prompt(engine, "Weather in Oslo?"),
        GREEDY,
        session_id="agent",
        grammar=llguidance.LLMatcher.grammar_from_lark(lark),
        tool_call_pattern="<tool_call>",
    )
    _run(engine, [req])
    assert engine.inspect().core.sessions.record("agent").last_stop == stop


def test_a_stop_reason_hint_wins_and_no_pattern_means_no_signal(
    make_engine: Callable[..., Engine],
) -> None:
    engine = make_engine()
    hinted = GenerateRequest(
        "h",
        _prompt(engine, "go"),
        GREEDY,
        session_id="a",
        stop_reason_hint="tool_use",
        tool_call_pattern="never-there",
    )
    plain = GenerateRequest("p", _prompt(engine, "go"), GREEDY, session_id="b")
    _run(engine, [hinted, plain])
    assert engine.inspect().core.sessions.record("a").last_stop == "tool_use"
    assert engine.inspect().core.sessions.record("b").last_stop is None
