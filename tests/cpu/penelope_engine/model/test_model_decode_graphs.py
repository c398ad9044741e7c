"""Decode steps over fixed buffers (`DecodeGraphs`, what CUDA captures as graphs) give the
logits of the eager flex path: batches padded to a bucket, rows whose context ends on a
page boundary or inside a page, a NaN left in a freed page's tail. On a CPU nothing is
captured; the buffers, the plan over them and `Decoder.run_step` are the same."""

from __future__ import annotations

import numpy as np
import torch

from penelope_engine.model.decode_graphs import DecodeGraphs, buckets_up_to
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import ModelRunner, decode_rows
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.kv_pool import KVPool

PAGE, PAGES = 4, 48
LENGTHS = (9, 12, 5)  # ends inside a page, on a page boundary, in the second page


class Run:
    """Sequences prefilled on their own pool, then decoded by `runner`."""

    def __init__(self, loaded: LoadedModel, graphs: bool) -> None:
        self.kv = KVPool(loaded.config, PAGES + 1, PAGE, torch.float32)  # + the padding page
        self.logits: list[torch.Tensor] = []
        tap = lambda items, logits, tokens: self.logits.append(logits.clone())  # noqa: E731
        static = DecodeGraphs(loaded.model, self.kv, 4, PAGES, capture=False) if graphs else None
        self.pad = self.kv.k[1][PAGES * PAGE :].clone()
        self.runner = ModelRunner(loaded.model, self.kv, 0, None, tap, "flex", static)
        self.free = list(range(PAGES - 1, -1, -1))
        rng = np.random.default_rng(0)
        self.seqs = []
        for i, n in enumerate(LENGTHS):
            seq = Sequence(GenerateRequest(f"r{i}", (1,)), np.empty(0, np.uint64),
                           rng.integers(3, 500, n).tolist())  # fmt: skip
            seq.extend_pages(np.array([self.free.pop() for _ in range(-(-n // PAGE))]))
            seq.todo = np.arange(n)
            self.runner.run([BatchItem(seq, np.arange(n), True)])
            seq.todo = np.empty(0, np.int64)
            self.seqs.append(seq)
        self.logits.clear()

    def decode(self, which: list[int]) -> list[int | None]:
        items = []
        for i in which:
            seq = self.seqs[i]
            if len(seq.tokens) > len(seq.page_table) * PAGE:
                seq.extend_pages(np.array([self.free.pop()]))
            items.append(BatchItem(seq, np.array([len(seq.tokens) - 1]), True))
        tokens = self.runner.run(items)
        for i, tok in zip(which, tokens):
            assert tok is not None
            self.seqs[i].tokens.append(tok)
        return tokens


def test_buckets_are_powers_of_two_up_to_the_batch() -> None:
    assert buckets_up_to(1) == (1,) and buckets_up_to(5) == (1, 2, 4, 8)
    assert buckets_up_to(64) == (1, 2, 4, 8, 16, 32, 64)


def test_fixed_buffer_decode_steps_equal_the_eager_flex_steps(tiny_qwen3: LoadedModel) -> None:
    eager, static = Run(tiny_qwen3, graphs=False), Run(tiny_qwen3, graphs=True)
    assert static.runner.graphs is not None
    # a NaN in the tail of row 0's last page, as a freed page can hold: zeroed before the step
    for run in (eager, static):
        tail = run.seqs[0].page_table[-1] * PAGE + len(run.seqs[0].tokens) % PAGE
        run.kv.v[0][tail + 1] = float("nan")
    for which in ([0, 1, 2], [2], [1, 0], [0, 1, 2], [0, 1, 2]):  # buckets 4, 1, 2, 4, 4
        assert static.decode(which) == eager.decode(which)
        got, want = static.logits[-1], eager.logits[-1]
        assert got.shape == want.shape and torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # the padding rows wrote the padding page only: nothing else differs between the pools
    held = PAGES * PAGE
    for layer in range(len(eager.kv.k)):
        got, want = static.kv.k[layer][:held], eager.kv.k[layer][:held]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert not torch.equal(static.kv.k[1][held:], static.pad)
    # a step that is not plain decode (two queries, or no token wanted) never takes the graphs
    assert decode_rows([BatchItem(static.seqs[0], np.array([3, 4]), True)]) is None
    assert decode_rows([BatchItem(static.seqs[0], np.array([3]), False)]) is None
    rows = decode_rows([BatchItem(static.seqs[0], np.array([3]), True)])
    assert rows is not None and static.runner.graphs.fits(rows)
    assert not static.runner.graphs.fits(rows * (static.runner.graphs.max_batch + 1))
