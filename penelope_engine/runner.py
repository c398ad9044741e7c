"""ModelRunner: one forward pass over a batch of (sequence, query positions), then sampling."""

from __future__ import annotations

import numpy as np
import torch

from penelope_engine.kv_pool import KVPool
from penelope_engine.model.attention import AttentionMetadata
from penelope_engine.sequence import BatchItem
from penelope_engine.util import cdiv

__all__ = ["BatchItem", "ModelRunner", "build_metadata"]


def build_metadata(
    items: list[BatchItem], page_size: int, device: torch.device
) -> tuple[torch.Tensor, AttentionMetadata]:
    """Token ids and metadata of one step; logits only for the items that sample a token."""
    ids, pos, slots, starts, ctx, tables = [], [], [], [0], [], []
    for it in items:
        p = it.positions
        table = it.seq.page_table
        tokens = np.asarray(it.seq.tokens, dtype=np.int64)
        ids.append(tokens[p])
        pos.append(p)
        slots.append(table[p // page_size].astype(np.int64) * page_size + p % page_size)
        starts.append(starts[-1] + len(p))
        ctx_len = int(p[-1]) + 1
        ctx.append(ctx_len)
        tables.append(torch.from_numpy(table[: cdiv(ctx_len, page_size)].astype(np.int64)))
    to = lambda arrs: torch.from_numpy(np.concatenate(arrs)).to(device)  # noqa: E731
    meta = AttentionMetadata(
        positions=to(pos),
        slot_mapping=to(slots),
        query_starts=tuple(starts),
        context_lens=tuple(ctx),
        page_tables=tuple(t.to(device) for t in tables),
        logits_indices=torch.tensor(
            [end - 1 for end, it in zip(starts[1:], items) if it.wants_token],
            dtype=torch.int64,
            device=device,
        ),
    )
    return to(ids), meta


GREEDY_BELOW = 1e-3


def sample(logits: torch.Tensor, items: list[BatchItem], seed: int) -> list[int]:
    """One token per item from its row of `logits` (greedy, or temperature / top-p)."""
    out = []
    for row, it in zip(logits, items):
        sp = it.seq.req.sampling
        if sp.temperature < GREEDY_BELOW:  # near zero, softmax(logits / t) is argmax
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
    return out


class ModelRunner:
    def __init__(self, model: torch.nn.Module, kv: KVPool, seed: int = 0) -> None:
        prepare = getattr(model, "prepare_decode", None)
        if prepare is not None:  # the decode weight copies before serving (`model.gemm`)
            prepare()
        self.model = model
        self.kv = kv
        self.seed = seed
        self.device = kv.device

    def run(self, items: list[BatchItem]) -> list[int | None]:
        """Forward the batch; a sampled token for items that want one, else None."""
        ids, meta = build_metadata(items, self.kv.page_size, self.device)
        logits = self.model(ids, meta, self.kv)  # one row per item that wants a token
        wants = [i for i, it in enumerate(items) if it.wants_token]
        tokens: list[int | None] = [None] * len(items)
        if wants:
            picked = sample(logits, [items[i] for i in wants], self.seed)
            for i, t in zip(wants, picked):
                tokens[i] = t
        return tokens
