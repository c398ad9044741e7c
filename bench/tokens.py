"""Deterministic token ids for trace turns.

A turn's tokens are a pure function of where they sit:

    position  < shared_prefix_tokens      the session's prefix blocks   shared across sessions
    position in block j of the turn       f(block_scope, block id) xor g(offset in block)
    beyond the turn's blocks              f(session id, turn index, position)

so equal trace blocks give equal tokens (and equal page hashes). The
cross-session prefix is the session's `prefix_blocks` laid end to end (system
prompt, then tool schemas: the engine's chat-template order); a block's tokens
are a stream seeded by its kind and key, so sessions with equal keys share it
and sessions with different keys do not. A session without prefix blocks
starts with the one common stream (`shared_prefix`), as every session did
before traces named their prefixes (a session with a shorter prefix shares its
first part).

A turn's block list looks one turn ahead when the next turn extends it: the
partial last block of this input and this turn's output tokens are the next
input's tokens at those positions, as in a real agent, whose next request
repeats the model's answer. Otherwise they come from the per-turn stream.
"""

from __future__ import annotations

import numpy as np

from bench.sessions import PrefixBlock, Session
from penelope_engine.cache.pages import mix64, seed64
from penelope_engine.util import cdiv

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def _seed(*parts: str) -> np.uint64:
    return _U64(seed64(*parts))


class TokenMap:
    """Token ids in [low, vocab_size) for the turns of trace sessions."""

    def __init__(self, vocab_size: int, low: int = 0, seed: str = "penelope-bench") -> None:
        if not 0 <= low < vocab_size <= 1 << 32:
            raise ValueError(f"need 0 <= low < vocab_size <= 2^32, got {low}, {vocab_size}")
        self.vocab_size = vocab_size
        self.low = low
        self._span = _U64(vocab_size - low)
        self._seed = seed
        self._shared = _seed(seed, "shared-prefix")
        self._stream = np.empty(0, dtype=np.int64)
        self._block_streams: dict[tuple[str, str], np.ndarray] = {}
        self._offset_tables: dict[int, np.ndarray] = {}

    def _offsets(self, bt: int) -> np.ndarray:
        table = self._offset_tables.get(bt)
        if table is None:
            pos = np.arange(bt, dtype=np.uint64)
            table = self._offset_tables[bt] = mix64(self._shared ^ mix64(pos + _U64(1)))
        return table

    def _scale(self, x: np.ndarray) -> np.ndarray:
        """Random uint64 -> [low, vocab_size) by the high 32 bits (in place)."""
        x >>= _U64(32)
        x *= self._span
        x >>= _U64(32)
        x += _U64(self.low)
        return x.view(np.int64)

    def _to_vocab(self, x: np.ndarray) -> np.ndarray:
        return self._scale(mix64(x))

    def shared_prefix(self, n: int) -> np.ndarray:
        if len(self._stream) < n:
            pos = np.arange(max(n, 2 * len(self._stream)), dtype=np.uint64)
            self._stream = self._to_vocab(self._shared + pos * _GOLDEN)
        return self._stream[:n]

    def _block_stream(self, block: PrefixBlock) -> np.ndarray:
        """The tokens of one prefix block: a stream seeded by its kind and key."""
        stream = self._block_streams.get((block.kind, block.key))
        if stream is None or len(stream) < block.tokens:
            pos = np.arange(block.tokens, dtype=np.uint64)
            start = _seed(self._seed, "prefix-block", block.kind, block.key)
            stream = self._block_streams[block.kind, block.key] = self._to_vocab(
                start + pos * _GOLDEN
            )
        return stream[: block.tokens]

    def prefix_ids(self, session: Session, n: int) -> np.ndarray:
        """The first `n` tokens of the session's cross-session prefix."""
        if not session.prefix_blocks:
            return self.shared_prefix(n)
        out = np.concatenate([self._block_stream(b) for b in session.prefix_blocks])
        if len(out) < n:
            raise ValueError(f"session {session.id}: {n} prefix tokens, its blocks hold {len(out)}")
        return out[:n]

    def block_span(self, session: Session, k: int, kind: str) -> tuple[int, int]:
        """Where turn k's input holds the prefix block of `kind`: [start, end), or (0, 0)
        when it has none."""
        n, start = session.turns[k].shared_prefix_tokens, 0
        for b in session.prefix_blocks:
            if b.kind == kind:
                return min(start, n), min(start + b.tokens, n)
            start += b.tokens
        return 0, 0

    def _blocks(self, session: Session, k: int) -> np.ndarray:
        """Block ids covering turn k's input, extended by the next turn's when it extends k."""
        turns = session.turns
        ids = turns[k].block_ids()
        full = min(len(ids), turns[k].input_tokens // session.block_tokens)
        if k + 1 < len(turns) and turns[k + 1].num_blocks > full:
            nxt = turns[k + 1].block_ids()
            if np.array_equal(nxt[:full], ids[:full]):
                return np.concatenate([ids[:full], nxt[full:]])
        return ids

    def sequence_ids(self, session: Session, k: int) -> np.ndarray:
        """Turn k's input tokens followed by its output tokens."""
        turn = session.turns[k]
        n = turn.input_tokens + turn.output_tokens
        out = np.empty(n, dtype=np.int64)
        p = min(turn.shared_prefix_tokens, n)
        out[:p] = self.prefix_ids(session, p)
        blocks, bt = self._blocks(session, k), session.block_tokens
        b = max(p, min(n, len(blocks) * bt))
        if b > p:  # token = (mix(block id) xor mix(offset)) scaled into the vocabulary
            first, last = p // bt, cdiv(b, bt)
            scope = _seed(self._seed, "block", session.block_scope)
            grid = mix64(blocks[first:last] ^ scope)[:, None] ^ self._offsets(bt)[None, :]
            out[p:b] = self._scale(grid.reshape(-1))[p - first * bt : b - first * bt]
        if n > b:
            tail = _seed(self._seed, "tail", session.id, str(k))
            out[b:] = self._to_vocab(tail + np.arange(b, n, dtype=np.uint64) * _GOLDEN)
        return out

    def input_ids(self, session: Session, k: int) -> np.ndarray:
        return self.sequence_ids(session, k)[: session.turns[k].input_tokens]

    def output_ids(self, session: Session, k: int) -> np.ndarray:
        return self.sequence_ids(session, k)[session.turns[k].input_tokens :]


def repeat_answer(ids: np.ndarray, last: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Turn k+1's input `ids` (the trace's) with what the session really sent and got before.

    `last` is turn k's whole sequence twice: as the trace has it (prompt and
    output) and as it ran (its prompt as sent, the tokens the model generated).
    Where turn k+1 extends turn k in the trace, those positions carry the
    tokens that really ran, as an agent repeats the answers it got; earlier
    turns' answers are in turn k's prompt already, so they carry over too.
    Returns `ids` itself when nothing differs (the simulator's scripted answers
    are the trace's), else a copy.
    """
    if last is None:
        return ids
    raw, actual = last
    n = min(len(ids), len(raw), len(actual))
    diff = np.flatnonzero(ids[:n] != raw[:n])
    common = int(diff[0]) if len(diff) else n
    if np.array_equal(ids[:common], actual[:common]):
        return ids
    out = ids.copy()
    out[:common] = actual[:common]
    return out


def shared_prefixes(prompts: list[list[int] | None]) -> list[int]:
    """Per prompt: the longest token prefix it shares with an earlier prompt (0 for a
    prompt that is None: one the server refused, which had nothing to share)."""
    seen: list[list[int]] = []
    out = []
    for ids in prompts:
        if ids is None:
            out.append(0)
            continue
        out.append(max((_common(ids, p) for p in seen), default=0))
        seen.append(ids)
    return out


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
