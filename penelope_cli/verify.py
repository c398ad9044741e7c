"""`penelope verify`: recomputing holes is exact, in the decoder and through the whole engine.

Fused (--cases): each case draws a session (a shared prefix, private history,
new tokens) and a pattern of holes in the cached history: several holes,
holes on and off page boundaries, a hole right after the shared prefix, or
the whole private history gone. The full prefill writes every position's KV
into pool A. The fused path starts pool B from A's KV on a shuffled page
table, fills every hole with NaN, then recomputes the holes and the new
tokens in one forward (or several position-ordered chunks). Logits of the
new tokens and the KV of every position must match; a NaN anywhere fails.

    |-- prefix --|-- private history (holes + cached) --|-- new --|

Engine (--sessions): multi-turn agent sessions through the real `Engine` on
a cache so tight that it forms holes and moves pages through host and store,
against each turn run from scratch on a fresh engine (verify_engine.py).

Reference (--reference transformers): Hugging Face transformers loads the
same checkpoint itself and runs in float32; its logits must match ours.

JSON: "cases", "max_abs_diff" (worst of every comparison) and "ok" (all
passed), then "fused", "engine" and "reference"; a NaN difference reads "nan".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from penelope_cli.closeness import max_abs_diff, passes, worst
from penelope_cli.verify_engine import run_engine, run_reference
from penelope_engine.config import DType
from penelope_engine.helpformat import parser
from penelope_engine.model.backends import ATTENTION_BACKENDS, resolve_backend
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import step_inputs, unwritten_tails
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.kv_pool import DTYPES, KVPool
from penelope_engine.util import cdiv

REFERENCES = ("none", "transformers")


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
    lm: LoadedModel,
    pool: KVPool,
    seq: Sequence,
    positions: np.ndarray,
    chunks: int,
    first: int,
    attention: str,
) -> torch.Tensor:
    """Logits of the queries at positions >= `first`, computing `positions` in `chunks`
    position-ordered passes (every pass writes the KV of its positions)."""
    rows = []
    seq.todo = positions  # what the passes compute, as the scheduler marks it
    for part in np.array_split(positions, chunks):
        if len(part) == 0:
            continue
        item = BatchItem(seq, part, True)
        ids, meta = step_inputs([item], pool.page_size, pool.device, attention)
        if attention == "flex":  # as `ModelRunner.run` does: flex reads whole pages
            pool.zero_slots(torch.from_numpy(unwritten_tails([item], pool.page_size)))
        wanted = torch.from_numpy(np.flatnonzero(part >= first)).to(pool.device)
        meta = replace(meta, logits_indices=wanted)
        rows.append(lm.model(ids, meta, pool))
    return torch.cat(rows)


def run_case(
    lm: LoadedModel,
    case: Case,
    page_size: int,
    rng: np.random.Generator,
    dtype: torch.dtype,
    device: str,
    attention: str = "sdpa",
) -> float:
    """max |fused - full| over the new tokens' logits and every position's K and V; NaN if
    either side holds a NaN (a hole the fused pass left unfilled reads NaN). The fused pass
    attends with `attention` (resolved), the full prefill with the reference (`sdpa`)."""
    n = len(case.tokens)
    pages = cdiv(n, page_size)
    pool_a = KVPool(lm.config, pages, page_size, dtype, device)
    pool_b = KVPool(lm.config, pages, page_size, dtype, device)
    table_a = np.arange(pages)
    table_b = rng.permutation(pages)
    cached = n - case.num_new
    full = _forward(lm, pool_a, _seq(case.tokens, table_a), np.arange(n), 1, cached, "sdpa")
    slots_a = torch.from_numpy(
        table_a[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    ).to(pool_a.device)
    slots_b = torch.from_numpy(
        table_b[np.arange(n) // page_size] * page_size + np.arange(n) % page_size
    ).to(pool_b.device)
    missing = np.concatenate([case.holes, np.ones(case.num_new, dtype=bool)])
    keep = torch.from_numpy(~missing).to(pool_b.device)
    for layer in range(lm.config.num_layers):
        for a, b in ((pool_a.k[layer], pool_b.k[layer]), (pool_a.v[layer], pool_b.v[layer])):
            b.fill_(float("nan"))
            b[slots_b[keep]] = a[slots_a[keep]]
    queries = np.flatnonzero(missing)
    fused = _forward(
        lm, pool_b, _seq(case.tokens, table_b), queries, case.chunks, cached, attention
    )
    diffs = [max_abs_diff(fused, full)]
    for layer in range(lm.config.num_layers):
        diffs.append(max_abs_diff(pool_b.k[layer][slots_b], pool_a.k[layer][slots_a]))
        diffs.append(max_abs_diff(pool_b.v[layer][slots_b], pool_a.v[layer][slots_a]))
    return worst(diffs)


def run_fused(
    lm: LoadedModel,
    cases: int,
    page_size: int,
    seed: int,
    dtype: str,
    device: str,
    tol: float,
    attention: str = "auto",
) -> dict:
    rng = np.random.default_rng(seed)
    backend = resolve_backend(attention, device)
    diffs = []
    for i in range(cases):
        case = draw_case(rng, lm.config.vocab_size, page_size, i)
        diffs.append(run_case(lm, case, page_size, rng, DTYPES[dtype], device, backend))
    failed = sum(not passes(d, tol) for d in diffs)
    diff = worst(diffs)
    return {"cases": cases, "failed_cases": failed, "max_abs_diff": diff, "ok": failed == 0}


def random_sequences(lm: LoadedModel, page_size: int, seed: int) -> list:
    """Reference sequences when no engine turns ran: three random prompts, no sampled rows."""
    rng = np.random.default_rng(seed)
    lengths = [page_size * k + 3 for k in (2, 5, 9)]
    return [(rng.integers(0, lm.config.vocab_size, n + 1).tolist(), n, []) for n in lengths]


def verify(
    model: str = "tiny-qwen3",
    cases: int = 50,
    page_size: int = 16,
    seed: int = 0,
    dtype: DType = "float32",
    device: str = "cpu",
    tolerance: float = 1e-4,
    sessions: int = 4,
    turns: int = 4,
    max_tokens: int = 3,
    reference: str = "none",
    attention: str = "auto",
) -> dict:
    """Run the checks; the report as plain data (NaN and infinite differences as floats).
    The fused passes and the tight engine attend with `attention`; the full prefills and
    the engine's from-scratch turns with the reference (`sdpa`)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    lm = load_model(model, dtype, device)
    result: dict[str, Any] = {"cases": cases, "attention": resolve_backend(attention, device)}
    sections: dict[str, dict] = {}
    if cases > 0:
        sections["fused"] = run_fused(
            lm, cases, page_size, seed, dtype, device, tolerance, attention
        )
    turns_run: list = []
    if sessions > 0 and turns > 0:
        sections["engine"], turns_run = run_engine(
            lm, model, dtype, device, page_size, sessions, turns, max_tokens, seed, tolerance,
            attention,
        )  # fmt: skip
    if reference == "transformers":
        seqs = turns_run or random_sequences(lm, page_size, seed)
        sections["reference"] = run_reference(lm, model, page_size, seqs, tolerance)
    result["max_abs_diff"] = worst(s["max_abs_diff"] for s in sections.values())
    result["ok"] = bool(sections) and all(s["ok"] for s in sections.values())
    return result | sections


def jsonable(value: Any) -> Any:
    """`value` with NaN and infinite floats as the strings "nan", "inf" (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope verify", __doc__)
    ap.add_argument("--model", default="tiny-qwen3", help="registered model name or directory")
    ap.add_argument(
        "--cases",
        type=int,
        default=50,
        help="fused check: random sessions and hole patterns (0 skips it)",
    )
    ap.add_argument(
        "--sessions", type=int, default=4, help="engine check: agent sessions (0 skips it)"
    )
    ap.add_argument("--turns", type=int, default=4, help="engine check: turns of each session")
    ap.add_argument(
        "--max-tokens", type=int, default=3, help="engine check: greedy tokens per turn"
    )
    ap.add_argument(
        "--reference",
        default="none",
        choices=REFERENCES,
        help="also compare logits with this library loading the same checkpoint itself",
    )
    ap.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES), help="model and KV dtype")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument(
        "--attention",
        default="auto",
        choices=ATTENTION_BACKENDS.names(),
        help="backend of the fused passes and the tight engine (the references use sdpa)",
    )
    ap.add_argument(
        "--tolerance", type=float, default=1e-4, help="largest max |logit or KV diff| that passes"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the drawn cases and sessions")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = verify(
        args.model,
        args.cases,
        args.page_size,
        args.seed,
        args.dtype,
        args.device,
        args.tolerance,
        args.sessions,
        args.turns,
        args.max_tokens,
        args.reference,
        args.attention,
    )
    print(json.dumps(jsonable(result), allow_nan=False))
    if not args.json:
        for name in ("fused", "engine", "reference"):
            if name in result:
                s = result[name]
                status = "OK" if s["ok"] else "MISMATCH"
                why = f" ({s['error']})" if "error" in s else ""
                print(
                    f"{status}: {name}, max |diff| = {s['max_abs_diff']:.3g}{why}", file=sys.stderr
                )
    return 0 if result["ok"] else 1
