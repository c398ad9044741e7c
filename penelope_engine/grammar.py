"""Structured outputs: a request's grammar masks its own row of the logits, nothing else.

A request may carry a grammar (`GenerateRequest.grammar`: llguidance's grammar
text, built and checked at the API edge by `deployments.api.tools.constraint`). The
sampler (`penelope_engine.runner.sample`) asks `GrammarMasks` for the tokens that
grammar allows next, sets every other logit of that request's row to -inf, samples
as usual (greedy, temperature, top-p), and tells the matcher the token it took:

    step logits  [row a: free] [row b: grammar] [row c: free]
    mask         -             allowed(b)       -
    sample       a             b (always valid) c
    commit       -             matcher(b) += token

Rows without a grammar are not touched, so a batch mixes constrained and free
requests, and the prompt's KV and its cache pages are never involved: only the
choice of the next token is. Once the grammar is complete, only end-of-sequence
tokens are allowed, so the request stops there.

The matcher lives on the request's `Sequence` (made when the request is added;
a grammar llguidance rejects raises `InvalidRequestError` then, before any step),
so a preempted request resumes its grammar where it was. llguidance's tokenizer
view of the vocabulary is built once per engine, on the first grammar (about a
second per 100K tokens; `warm` builds it off the step thread).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import llguidance
import numpy as np
import torch

from penelope_engine.errors import InvalidRequestError

if TYPE_CHECKING:
    from penelope_engine.sched.sequence import Sequence
    from penelope_engine.tokenizer import Tokenizer


class GrammarMasks:
    """The grammars of one engine's requests over its tokenizer and vocabulary."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int) -> None:
        self._tokenizer = tokenizer
        self._vocab = vocab_size
        self._lltok: llguidance.LLTokenizer | None = None
        self._building = threading.Lock()

    def warm(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary, built on first use (thread-safe)."""
        with self._building:
            if self._lltok is None:
                self._lltok = llguidance.LLTokenizer(
                    self._tokenizer.backend.to_str(),
                    n_vocab=self._vocab,
                    eos_token=list(self._tokenizer.eos_token_ids),
                )
            return self._lltok

    def attach(self, seq: Sequence) -> None:
        """Give `seq` a matcher for its grammar; InvalidRequestError if it has a bad one."""
        grammar = seq.req.grammar
        if grammar is None:
            return
        matcher = llguidance.LLMatcher(self.warm(), grammar, log_level=0)
        if matcher.is_error():
            raise InvalidRequestError(f"grammar: {matcher.get_error()}")
        seq.matcher = matcher

    def allowed(self, seq: Sequence) -> np.ndarray | None:
        """The tokens `seq` may sample next (a bool per vocabulary entry), or None: any."""
        matcher = seq.matcher
        if matcher is None or matcher.is_error():
            return None
        words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(words, bitorder="little")[: self._vocab].astype(bool)

    def mask_row(self, row: torch.Tensor, seq: Sequence) -> torch.Tensor:
        """`row` with the logits `seq`'s grammar forbids set to -inf (a new tensor)."""
        allowed = self.allowed(seq)
        if allowed is None:
            return row
        keep = torch.from_numpy(allowed).to(row.device)
        n = min(len(keep), row.shape[-1])
        out = torch.full_like(row, float("-inf"))
        out[:n] = torch.where(keep[:n], row[:n], out[:n])
        return out

    @staticmethod
    def advance(seq: Sequence, token: int) -> None:
        if seq.matcher is not None:
            seq.matcher.consume_token(token)
