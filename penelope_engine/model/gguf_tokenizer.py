"""Byte-level BPE tokenizer rebuilt from GGUF metadata (``tokenizer.ggml.*``).

llama.cpp stores the vocabulary (already in the byte-to-unicode spelling),
the merges, a type per token and the name of the pre-tokenizer; we rebuild
the `tokenizers` pipeline that name stands for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers

from penelope_engine.errors import ConfigError
from penelope_engine.tokenizer import Tokenizer

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types


def _smollm() -> pre_tokenizers.PreTokenizer:
    # llama.cpp "smollm": every digit alone, then the GPT-2 split
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _gpt2() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    "smollm": _smollm,
    "gpt2": _gpt2,
    "default": _gpt2,
}


def tokenizer_from_gguf(meta: dict[str, Any]) -> Tokenizer:
    """Build the tokenizer from GGUF metadata read into a plain dict (key -> value)."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ConfigError(
            f"GGUF tokenizer model {kind!r} is not supported (only byte-level 'gpt2')"
        )
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in PRE_TOKENIZERS:
        raise ConfigError(
            f"GGUF pre-tokenizer {pre!r} is not supported; known: {sorted(PRE_TOKENIZERS)}"
        )
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False)
    backend = tokenizers.Tokenizer(bpe)
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    backend.decoder = decoders.ByteLevel()
    _add_typed_tokens(backend, tokens, list(meta.get("tokenizer.ggml.token_type", [])))
    eos_id = int(meta["tokenizer.ggml.eos_token_id"])
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    return Tokenizer(
        backend,
        [eos_id],
        meta.get("tokenizer.chat_template"),
        bos_token=None if bos_id is None else tokens[int(bos_id)],
        eos_token=tokens[eos_id],
    )


def _add_typed_tokens(backend: tokenizers.Tokenizer, tokens: list[str], types: list[int]) -> None:
    """Control tokens become special added tokens and user-defined ones plain added tokens,
    so that text containing them encodes each as one id."""
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, types)
        if kind == CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, kind in zip(tokens, types)
        if kind == USER_DEFINED
    ]
    backend.add_special_tokens(special)
    backend.add_tokens(user)
