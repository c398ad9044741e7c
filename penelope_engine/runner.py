"""ModelRunner: one forward pass over a batch of (sequence, query positions), then sampling.

Sampling is per row: a request's grammar (`penelope_engine.grammar`) masks its own
row before its token is chosen; rows without one are sampled as they come.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import torch

from penelope_engine.errors import StepMemoryError
from penelope_engine.grammar import GrammarMasks
from penelope_engine.model.attention import AttentionMetadata, build_metadata
from penelope_engine.model.backends import resolve_backend
from penelope_engine.model.decode_graphs import DecodeGraphs, DecodeRow
from penelope_engine.protocol import GREEDY_BELOW_TEMPERATURE
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.tiers.kv_pool import KVPool
from penelope_engine.util import cdiv

__all__ = ["BatchItem", "ModelRunner", "PartialStep", "step_inputs"]

log = logging.getLogger(__name__)


def _release_cached_memory(device: torch.device) -> None:
    """Hand the caching allocator's free blocks back before a retry (CUDA only)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def step_inputs(
    items: list[BatchItem], page_size: int, device: torch.device, attention: str = "pieces"
) -> tuple[torch.Tensor, AttentionMetadata]:
    """Token ids and metadata of one step; logits only for the items that sample a token."""
    ids, tables, ctx = [], [], []
    for it in items:
        ctx_len = int(it.positions[-1]) + 1
        tokens = it.seq.tokens  # read at this step's positions only: O(queries), not O(context)
        ids.append(np.fromiter((tokens[p] for p in it.positions), np.int64, len(it.positions)))
        tables.append(it.seq.page_table[: cdiv(ctx_len, page_size)])
        ctx.append(ctx_len)
    meta = build_metadata(
        [it.positions for it in items],
        tables,
        ctx,
        page_size,
        device=device,
        logits_of=[it.wants_token for it in items],
        backend=attention,
    )
    return torch.from_numpy(np.concatenate(ids)).to(device), meta


def unwritten_tails(items: list[BatchItem], page_size: int) -> np.ndarray:
    """Slots of each item's last page past its context that hold no position yet: past the
    sequence's tokens, or positions it computes in a later step (`Sequence.todo`).

    A kernel that reads whole pages (`flex`) reads them with weight zero, and zero times a
    NaN is a NaN: a page freed by a request whose forward overflowed would poison the next
    owner. Zeroing them first keeps every slot it reads finite. Such a slot is the
    sequence's own (cached positions live in full tree pages), so no one else reads it."""
    tails = []
    for it in items:
        ctx_len = int(it.positions[-1]) + 1
        page, used = divmod(ctx_len, page_size)
        if not used:
            continue
        after = np.arange(ctx_len, (page + 1) * page_size, dtype=np.int64)
        todo = it.seq.todo
        pending = todo[np.searchsorted(todo, ctx_len) :]
        empty = (after >= len(it.seq.tokens)) | np.isin(after, pending[: len(after)])
        start = int(it.seq.page_table[page]) * page_size
        tails.append(start + after[empty] % page_size)
    return np.concatenate(tails) if tails else np.empty(0, np.int64)


def sample(
    logits: torch.Tensor, items: list[BatchItem], seed: int, grammars: GrammarMasks | None = None
) -> list[int]:
    """One token per item from its row of `logits` (greedy, or temperature / top-p), within
    the item's grammar when it has one."""
    out = []
    for row, it in zip(logits, items):
        sp = it.seq.req.sampling
        if grammars is not None and it.seq.matcher is not None:
            row = grammars.mask_row(row, it.seq)
        if sp.temperature < GREEDY_BELOW_TEMPERATURE:  # near zero, softmax(logits / t) is argmax
            out.append(int(torch.argmax(row)))
            continue
        if it.seq.generator is None:
            gen = torch.Generator(device="cpu")
            gen.manual_seed(sp.seed if sp.seed is not None else seed ^ hash(it.seq.request_id))
            it.seq.generator = gen
        probs = torch.softmax(row.float().cpu() / sp.temperature, dim=-1)
        if sp.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, 0) - sorted_p < sp.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        out.append(int(torch.multinomial(probs, 1, generator=it.seq.generator)))  # type: ignore[arg-type]
    if grammars is not None:
        for it, tok in zip(items, out):
            grammars.advance(it.seq, tok)
    return out


class PartialStep(Exception):
    """A step ran out of device memory; run apart, some items still did not fit.
    `tokens` holds what the others got (as `ModelRunner.run` returns); `failed` maps the
    index of each item that ran out of memory alone to the error its request ends with."""

    def __init__(self, tokens: list[int | None], failed: dict[int, StepMemoryError]) -> None:
        super().__init__(f"{len(failed)} of {len(tokens)} items did not fit in device memory")
        self.tokens = tokens
        self.failed = failed


def _what(item: BatchItem) -> str:
    return f"{len(item.positions)} query tokens over {int(item.positions[-1]) + 1} keys"


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        kv: KVPool,
        seed: int = 0,
        grammars: GrammarMasks | None = None,
        on_logits: Callable[[list[BatchItem], torch.Tensor, list[int | None]], None] | None = None,
        attention: str = "auto",
        graphs: DecodeGraphs | None = None,
    ) -> None:
        prepare = getattr(model, "prepare_decode", None)
        if prepare is not None:  # the decode weight copies before serving (`model.gemm`)
            prepare()
        self.model = model
        self.kv = kv
        self.seed = seed
        self.grammars = grammars
        self.on_logits = on_logits  # `BenchHooks.on_logits`
        self.device = kv.device
        self.attention = resolve_backend(attention, str(kv.device))  # `ATTENTION_BACKENDS`
        self.graphs = graphs  # decode steps over fixed buffers (CUDA graphs), when given

    def run(self, items: list[BatchItem]) -> list[int | None]:
        """Forward the batch; a sampled token for items that want one, else None.

        If the device runs out of memory, each item runs alone: one that does not fit alone
        fails, not its batch (`PartialStep` carries the others' tokens). An item's share of
        the failed pass wrote only its own slots, which running alone writes again."""
        try:
            return self._run(items)
        except torch.OutOfMemoryError as exc:
            log.warning("out of device memory in a step of %d items; running each alone: %s",
                        len(items), exc)  # fmt: skip
            first = exc
        tokens: list[int | None] = [None] * len(items)
        failed: dict[int, StepMemoryError] = {}
        for i, item in enumerate(items):
            _release_cached_memory(self.device)
            try:
                if len(items) == 1:  # it already ran alone
                    raise first
                (tokens[i],) = self._run([item])
            except torch.OutOfMemoryError as alone:
                failed[i] = StepMemoryError(
                    f"its step ({_what(item)}) does not fit in device memory even run "
                    f"alone: {alone}"
                )
        if failed:
            raise PartialStep(tokens, failed)
        return tokens

    def _run(self, items: list[BatchItem]) -> list[int | None]:
        if self.attention == "flex":  # it reads whole pages
            self.kv.zero_slots(torch.from_numpy(unwritten_tails(items, self.kv.page_size)))
        rows = decode_rows(items) if self.graphs is not None else None
        if self.graphs is not None and rows is not None and self.graphs.fits(rows):
            logits = self.graphs.run(rows)
        else:
            ids, meta = step_inputs(items, self.kv.page_size, self.device, self.attention)
            logits = self.model(ids, meta, self.kv)  # one row per item that wants a token
        wants = [i for i, it in enumerate(items) if it.wants_token]
        tokens: list[int | None] = [None] * len(items)
        if wants:
            picked = sample(logits, [items[i] for i in wants], self.seed, self.grammars)
            for i, t in zip(wants, picked):
                tokens[i] = t
        if self.on_logits is not None:
            self.on_logits(items, logits, tokens)
        return tokens


def decode_rows(items: list[BatchItem]) -> list[DecodeRow] | None:
    """The step as decode rows (one query each, each wanting a token), or None if it is not
    a plain decode step."""
    if not all(len(it.positions) == 1 and it.wants_token for it in items):
        return None
    rows = []
    for it in items:
        p = int(it.positions[0])
        rows.append(DecodeRow(it.seq.tokens[p], p, it.seq.page_table))
    return rows
