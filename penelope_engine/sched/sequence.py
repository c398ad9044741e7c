"""Per-request state the scheduler keeps while a request runs.

Page table of a request, by token position (page = position // page_size):

    |-- device hit --|-- hole / loaded --|-- device hit --|-- new --|-- decode --|
      tree pages       own pages           tree pages       own pages  own pages

`owned[i]` marks pages the request allocated; they join the tree on insert
(or are freed as duplicates) and the rest are freed when the request ends.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from penelope_engine.cache.prefix_cache import LockHandle
from penelope_engine.hints import HintGrant
from penelope_engine.protocol import FinishReason, GenerateRequest, RequestOutput, TokenUsage

if TYPE_CHECKING:
    from llguidance import LLMatcher


@dataclass(eq=False)
class Sequence:
    req: GenerateRequest
    hashes: np.ndarray  # page ids of the prompt's full pages
    tokens: list[int]
    arrival: float = field(default_factory=time.monotonic)
    prompt_len: int = 0
    page_table: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    owned: np.ndarray = field(default_factory=lambda: np.empty(0, bool))
    todo: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # positions to compute
    cursor: int = 0  # todo[:cursor] are computed
    lock: LockHandle | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    first_token_at: float | None = None
    finish_reason: FinishReason | None = None
    generator: object | None = None  # torch.Generator for sampling, made lazily
    matcher: LLMatcher | None = None  # its grammar's state (`penelope_engine.grammar`)
    error: Exception | None = None  # set when the engine had to fail the request
    public_pages: int = 0  # leading pages named alike for every tenant
    preemptions: int = 0  # times the scheduler put it back in the queue to free pages
    admitted_at: float | None = None  # first admission, on the scheduler's clock
    ready_at: float = 0.0  # its copies (demotions, loads) are done; prefill waits for it
    blocked_at: int = -1  # the scheduler's release count when it last failed to fit
    # Done once the store has the session's record of this turn (`SessionHandover`):
    # the last output waits for it, so a next turn elsewhere finds what was seen.
    recorded: Future[bool] | None = None
    hint_grants: list[HintGrant] = field(default_factory=list)  # what its hints got
    prompt_edit_at: int | None = None  # where its prompt left the session's last (tokens)

    # the prompt as int32, converted from `tokens` on first use unless the caller has it
    prompt_array: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.prompt_len = len(self.tokens)

    def token_array(self, n: int) -> np.ndarray:
        """The first `n` tokens as int32 (the prompt's part is converted once)."""
        if self.prompt_array is None:
            self.prompt_array = np.asarray(self.tokens[: self.prompt_len], dtype=np.int32)
        head = self.prompt_array[: min(n, self.prompt_len)]
        if n <= self.prompt_len:
            return head
        return np.concatenate([head, np.asarray(self.tokens[self.prompt_len : n], np.int32)])

    @property
    def request_id(self) -> str:
        return self.req.request_id

    @property
    def in_prefill(self) -> bool:
        return self.cursor < len(self.todo)

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def owned_pages(self) -> int:
        return int(self.owned.sum())

    def stop_for(self, tok: int, eos: frozenset[int], max_model_len: int) -> FinishReason | None:
        """Why the sequence ends with the new token `tok` ("stop", "length"), or None."""
        sp = self.req.sampling
        if tok in sp.stop_token_ids or (tok in eos and not sp.ignore_eos):
            return "stop"
        if self.num_generated >= sp.max_tokens or len(self.tokens) >= max_model_len:
            return "length"
        return None

    def extend_pages(self, pages: np.ndarray) -> None:
        self.page_table = np.concatenate([self.page_table, pages.astype(np.int32)])
        self.owned = np.concatenate([self.owned, np.ones(len(pages), bool)])


@dataclass(frozen=True)
class BatchItem:
    """One sequence's share of a step: the query positions it computes."""

    seq: Sequence
    positions: np.ndarray  # query positions of this step, ascending
    wants_token: bool  # the last query is the sequence's last token: sample from it


def output_of(seq: Sequence, emitted: int) -> RequestOutput:
    """What `seq` has produced since its first `emitted` tokens."""
    usage = replace(seq.usage, completion_tokens=seq.num_generated)
    ttft = seq.first_token_at - seq.arrival if seq.first_token_at is not None else None
    finished = seq.finish_reason is not None
    return RequestOutput(
        seq.request_id,
        tuple(seq.tokens[emitted:]),
        finished=finished,
        finish_reason=seq.finish_reason,
        usage=usage,
        ttft_s=ttft,
        hints=tuple(seq.hint_grants) if finished else (),
        prompt_edit_at=seq.prompt_edit_at,
    )
