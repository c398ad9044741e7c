"""Token ids to text deltas, with OpenAI stop strings.

Byte-level BPE can split one character over several tokens, so text is
decoded from all ids so far and a trailing replacement character is held
back until the character completes. Text that could be the start of a stop
string is held back too, so a stop string never leaks into a stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from deployments.api.backend import TokenizerLike

_INCOMPLETE = "\ufffd"


class TextStream:
    """Accumulates completion tokens; `push` returns the text safe to emit."""

    def __init__(self, tokenizer: TokenizerLike, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._skip = frozenset(tokenizer.eos_token_ids)
        self._stop = tuple(s for s in stop if s)
        self._ids: list[int] = []
        self._text = ""
        self._emitted = 0
        self.stopped = False  # a stop string was found; the caller should end the request
        self.stop_hit: str | None = None  # which one

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return self._text[: self._emitted]

    def push(self, token_ids: Iterable[int]) -> str:
        if self.stopped:
            return ""
        self._ids.extend(t for t in token_ids if t not in self._skip)
        decoded = self._tokenizer.decode(self._ids)
        if decoded.endswith(_INCOMPLETE):
            return ""
        self._text = self._cut_at_stop(decoded)
        end = len(self._text) if self.stopped else len(self._text) - self._stop_prefix_len()
        return self._advance(end)

    def flush(self) -> str:
        """At the end of the request: emit whatever was held back."""
        decoded = self._tokenizer.decode(self._ids)
        if not self.stopped:
            self._text = self._cut_at_stop(decoded)
        return self._advance(len(self._text))

    def _advance(self, end: int) -> str:
        if end <= self._emitted:
            return ""
        delta = self._text[self._emitted : end]
        self._emitted = end
        return delta

    def _cut_at_stop(self, text: str) -> str:
        if not self._stop:
            return text
        longest = max(len(s) for s in self._stop)
        start = max(0, self._emitted - longest + 1)
        hits = [(i, s) for s in self._stop if (i := text.find(s, start)) >= 0]
        if not hits:
            return text
        self.stopped = True
        at, self.stop_hit = min(hits)
        return text[:at]

    def _stop_prefix_len(self) -> int:
        """Length of the longest tail of the text that begins some stop string."""
        tail_max = min(
            len(self._text) - self._emitted, max((len(s) for s in self._stop), default=0)
        )
        for k in range(tail_max, 0, -1):
            tail = self._text[-k:]
            if any(s.startswith(tail) for s in self._stop):
                return k
        return 0
