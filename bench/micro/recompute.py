"""`penelope bench recompute`: rebuilding the front of a history vs its tail.

Over an N-token context whose KV is cached, recompute an M-token segment at
the front of the private history (positions P..P+M) and, separately, at its
tail (N-M..N), each as one fused pass at its true positions, on the tiny
Qwen3. The tail attends over ~N earlier keys per token, the front over ~P:
that difference is what Penelope's front-first eviction saves.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from penelope_cli.helpformat import parser
from penelope_engine.model.registry import load_model
from penelope_engine.protocol import GenerateRequest
from penelope_engine.runner import step_inputs
from penelope_engine.sched.sequence import BatchItem, Sequence
from penelope_engine.tiers.kv_pool import KVPool
from penelope_engine.util import cdiv


def _pass(lm, pool: KVPool, seq: Sequence, positions: np.ndarray, chunk: int) -> float:
    start = time.perf_counter()
    for a in range(0, len(positions), chunk):
        ids, meta = step_inputs(
            [BatchItem(seq, positions[a : a + chunk], True)], pool.page_size, pool.device
        )
        lm.model(ids, meta, pool)
    if pool.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run(
    context: int,
    segment: int,
    prefix: int = 0,
    model: str = "tiny-qwen3",
    repeats: int = 3,
    page_size: int = 16,
    chunk: int = 1024,
    device: str = "cpu",
) -> dict:
    if not 0 < segment <= context - prefix:
        raise ValueError("need 0 < segment <= context - prefix")
    lm = load_model(model, "float32", device)
    pages = cdiv(context, page_size)
    pool = KVPool(lm.config, pages, page_size, torch.float32, device)
    tokens = np.random.default_rng(0).integers(0, lm.config.vocab_size, context)
    seq = Sequence(GenerateRequest("bench", (0,)), np.empty(0, np.uint64), tokens.tolist())
    seq.page_table = np.arange(pages, dtype=np.int32)
    _pass(lm, pool, seq, np.arange(context), chunk)  # fill the cache
    front_pos = np.arange(prefix, prefix + segment)
    tail_pos = np.arange(context - segment, context)
    front = min(_pass(lm, pool, seq, front_pos, chunk) for _ in range(repeats))
    tail = min(_pass(lm, pool, seq, tail_pos, chunk) for _ in range(repeats))
    return {
        "context": context,
        "segment": segment,
        "prefix": prefix,
        "front_s": front,
        "tail_s": tail,
        "ratio": tail / front,
        "threads": torch.get_num_threads(),
        "model": model,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench recompute", __doc__)
    ap.add_argument("--context", type=int, default=8192, help="cached context tokens N")
    ap.add_argument("--segment", type=int, default=1024, help="tokens M recomputed at each end")
    ap.add_argument(
        "--prefix", type=int, default=0, help="shared prefix P before the private history"
    )
    ap.add_argument("--model", default="tiny-qwen3", help="registered model name or directory")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each pass")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    r = run(args.context, args.segment, args.prefix, args.model, args.repeats, device=args.device)
    print(json.dumps(r))
    if not args.json:
        print(
            f"front {r['front_s']:.3f}s  tail {r['tail_s']:.3f}s  tail/front {r['ratio']:.2f}x "
            f"({r['threads']} threads)"
        )
    return 0
