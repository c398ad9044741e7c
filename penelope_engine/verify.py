"""`penelope verify`: the fused recompute equals a full prefill, on your model and hardware.

Each case draws a session (a shared prefix, private history, new tokens) and
a pattern of holes in the cached history: several holes, holes on and off
page boundaries, a hole right after the shared prefix, or the whole private
history gone. The full prefill writes every position's KV into pool A. The
fused path starts pool B from A's KV on a shuffled page table, fills every
hole with NaN, then recomputes the holes and the new tokens in one forward
(or several position-ordered chunks). Logits of the new tokens and the KV of
every position must match.

    |-- prefix --|-- private history (holes + cached) --|-- new --|
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np
import torch

from penelope_engine.helpformat import parser
from penelope_engine.kv_pool import DTYPES, KVPool
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import BatchItem, build_metadata
from penelope_engine.sequence import Sequence


@dataclass(frozen=True)
class Case:
    tokens: np.ndarray
    holes: np.ndarray  # bool per cached position: KV missing
    num_new: int
    chunks: int


def draw_case(rng: np.random.Generator, vocab: int, page_size: int, index: int) -> Case:
    prefix = int(rng.integers(page_size, 6 * page_size))
    private = int(rng.integers(2 * page_size, 24 * page_size))
    num_new = int(rng.integers(1, 3 * page_size))
    n = prefix + private + num_new
    holes = np.zeros(prefix + private, dtype=bool)
    kind = index % 4
    if kind == 0:  # several holes anywhere in the private history, any alignment
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(prefix, prefix + private))
            holes[a : a + int(rng.integers(1, 3 * page_size))] = True
    elif kind == 1:  # page-aligned holes
        pages = np.arange(prefix // page_size + 1, (prefix + private) // page_size)
        for p in rng.choice(pages, size=min(len(pages), 3), replace=False) if len(pages) else []:
            holes[p * page_size : (p + 1) * page_size] = True
    elif kind == 2:  # a hole right after the shared prefix
        holes[prefix : prefix + int(rng.integers(1, private))] = True
    else:  # the whole private history gone
        holes[prefix:] = True
    tokens = rng.integers(0, vocab, size=n)
    return Case(tokens, holes, num_new, chunks=1 + index % 3)


def _seq(tokens: np.ndarray, table: np.ndarray) -> Sequence:
    seq = Sequence(GenerateRequest("verify", (0,)), np.empty(0, np.uint64), tokens.tolist())
    seq.page_table = table.astype(np.int32)
    return seq


def _forward(
    lm: LoadedModel, pool: KVPool, seq: Sequence, positions: np.ndarray, chunks: int
) -> torch.Tensor:
    """Logits of every query, computing `positions` in `chunks` position-ordered passes."""
    rows = []
    for part in np.array_split(positions, chunks):
        if len(part) == 0:
            continue
        ids, meta = build_metadata([BatchItem(seq, part, True)], pool.page_size, pool.device)
        meta = type(meta)(
            **{**meta.__dict__, "logits_indices": torch.arange(len(part), device=pool.device)}
        )
        rows.append(lm.model(ids, meta, pool))
    return torch.cat(rows)


def run_case(
    lm: LoadedModel,
    case: Case,
    page_size: int,
    rng: np.random.Generator,
    dtype: torch.dtype,
    device: str,
) -> float:
    n = len(case.tokens)
    pages = -(-n // page_size)
    pool_a = KVPool(lm.config, pages, page_size, dtype, device)
    pool_b = KVPool(lm.config, pages, page_size, dtype, device)
    table_a = np.arange(pages)
    table_b = rng.permutation(pages)
    full = _forward(lm, pool_a, _seq(case.tokens, table_a), np.arange(n), 1)
    cached = n - case.num_new
    slots_a = torch.from_numpy(
        table_a[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    )
    slots_b = torch.from_numpy(
        table_b[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    )
    missing = np.concatenate([case.holes, np.ones(case.num_new, dtype=bool)])
    for layer in range(lm.config.num_layers):
        for a, b in ((pool_a.k[layer], pool_b.k[layer]), (pool_a.v[layer], pool_b.v[layer])):
            b.fill_(float("nan"))
            keep = torch.from_numpy(~missing)
            b[slots_b[keep]] = a[slots_a[keep]]
    queries = np.flatnonzero(missing)
    fused = _forward(lm, pool_b, _seq(case.tokens, table_b), queries, case.chunks)
    new_rows = torch.from_numpy(np.searchsorted(queries, np.arange(cached, n)))
    diff = (fused[new_rows] - full[cached:]).abs().max().item()
    for layer in range(lm.config.num_layers):
        diff = max(
            diff,
            (pool_b.k[layer][slots_b] - pool_a.k[layer][slots_a]).abs().max().item(),
            (pool_b.v[layer][slots_b] - pool_a.v[layer][slots_a]).abs().max().item(),
        )
    return diff


def verify(
    model: str = "tiny-qwen3",
    cases: int = 50,
    page_size: int = 16,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
    tolerance: float = 1e-4,
) -> dict:
    lm = load_model(model, dtype, device)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for i in range(cases):
        case = draw_case(rng, lm.config.vocab_size, page_size, i)
        d = run_case(lm, case, page_size, rng, DTYPES[dtype], device)
        worst = max(worst, d if d == d else float("inf"))
    return {"cases": cases, "max_abs_diff": worst, "ok": worst <= tolerance}


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope verify", __doc__)
    ap.add_argument("--model", default="tiny-qwen3", help="registered model name or directory")
    ap.add_argument("--cases", type=int, default=50, help="random sessions and hole patterns")
    ap.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES), help="model and KV dtype")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument(
        "--tolerance", type=float, default=1e-4, help="largest max |fused - full| that passes"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the drawn cases")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = verify(
        args.model, args.cases, args.page_size, args.seed, args.dtype, args.device, args.tolerance
    )
    print(json.dumps(result))
    if not args.json:
        status = "OK" if result["ok"] else "MISMATCH"
        print(
            f"{status}: {args.cases} cases, max |fused - full| = {result['max_abs_diff']:.3g}",
            file=sys.stderr,
        )
    return 0 if result["ok"] else 1
