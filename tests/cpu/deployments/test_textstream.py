"""Token ids to text deltas with the real Qwen3 tokenizer: UTF-8 pieces and stop strings."""

from __future__ import annotations

import pytest

from deployments.api.textstream import TextStream
from penelope_engine.model.registry import qwen3_tokenizer
from penelope_engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return qwen3_tokenizer()


def feed(stream: TextStream, ids: list[int]) -> list[str]:
    deltas = [stream.push([i]) for i in ids]
    return [*deltas, stream.flush()]


def test_deltas_never_split_a_character(tok: Tokenizer) -> None:
    text = "naïve café, 世界 🎉 done"
    ids = tok.encode(text)
    assert len(ids) > len(text.split())  # some characters span several tokens
    deltas = feed(TextStream(tok), ids)
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)


def test_stop_string_across_tokens_is_cut_and_never_streamed(tok: Tokenizer) -> None:
    text = "alpha beta gamma delta epsilon"
    stream = TextStream(tok, stop=("gamma del",))
    deltas = feed(stream, tok.encode(text))
    assert "".join(deltas) == "alpha beta "
    assert stream.stopped and stream.text == "alpha beta "


def test_a_held_back_stop_prefix_is_released_when_it_does_not_complete(tok: Tokenizer) -> None:
    text = "one two thr three four"
    stream = TextStream(tok, stop=("three!",))
    deltas = feed(stream, tok.encode(text))
    assert "".join(deltas) == text and not stream.stopped


def test_earliest_of_several_stop_strings_wins_and_eos_is_not_text(tok: Tokenizer) -> None:
    ids = tok.encode("x = 1; y = 2; z = 3") + list(tok.eos_token_ids[:1])
    stream = TextStream(tok, stop=("z =", "; y"))
    assert "".join(feed(stream, ids)) == "x = 1"
    plain = TextStream(tok)
    assert "".join(feed(plain, ids)) == "x = 1; y = 2; z = 3"
