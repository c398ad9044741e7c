"""What a hole costs the engine: one returning turn's forward, hole against tail, in process.

    python -m bench.speed.holes [--context 6144] [--hole 2048] [--hole-start 2048]
                                [--new 64] [--batch 8] [--repeats 3]
                                [--attention pieces,flex] [--json OUT]

A returning turn that lost `--hole` tokens of its history recomputes them in one
fused forward with its `--new` tokens, attending over the whole `--context`
(Penelope: the hole sits at `--hole-start`, where front eviction leaves it). A
tail-first engine that lost as many tokens recomputes the *last* `--hole` of
the history instead: the same number of queries over the same keys, but a
plain prefix prefill. Both run here through `Decoder.forward` on the same
pages, with random KV (timing does not depend on the values), so the ratio
`hole_s / tail_s` is what the hole's queries cost over a tail's, with no
server, scheduler or HTTP in the figure. `decode_s` is one decode step of
`--batch` sequences at `--context`. `--attention` names the backends to time, one
after another in the same process (`ATTENTION_BACKENDS`; `flex` compiles at its
untimed first call); with several, the JSON is a list, one entry per backend.

Pair it with `penelope bench speed --shared-tokens CONTEXT-HOLE --turn-tokens
HOLE+NEW --turns 2 --against ...`, whose second turn is the tail-first engine's
returning turn over HTTP on both servers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

PAGE = 16


def _seconds(model: Any, kv: Any, positions: list[list[int]], lens: list[int],
             tables: list[torch.Tensor], repeats: int, backend: str) -> float:  # fmt: skip
    from penelope_engine.model.attention import build_metadata

    meta = build_metadata(positions, tables, lens, PAGE, backend=backend)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(200, 40000, meta.positions.shape, generator=gen)
    model(ids, meta, kv)  # the first call pays lazy set-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        model(ids, meta, kv)
    return (time.perf_counter() - t0) / repeats


def measure(model_name: str, context: int, hole: int, hole_start: int, new: int, batch: int,
            repeats: int, attention: str = "pieces") -> dict[str, Any]:  # fmt: skip
    from penelope_engine.model.registry import load_model
    from penelope_engine.tiers.kv_pool import KVPool

    if not 0 <= hole_start <= context - hole:
        raise SystemExit(f"the hole [{hole_start}, {hole_start + hole}) is not inside {context}")
    torch.set_num_threads(1)
    model = load_model(model_name, torch.float32, "cpu").model
    per_seq = -(-(context + new) // PAGE)
    kv = KVPool(model.config, per_seq * batch + 1, PAGE, torch.float32)
    for t in kv.k + kv.v:
        t.normal_(generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(per_seq * batch, generator=torch.Generator().manual_seed(2))
    tables = [perm[i * per_seq : (i + 1) * per_seq] for i in range(batch)]
    tail = list(range(context - hole, context))
    holed = list(range(hole_start, hole_start + hole))
    fresh = list(range(context, context + new))
    hole_s = _seconds(model, kv, [holed + fresh], [context + new], tables[:1], repeats,
                      attention)  # fmt: skip
    tail_s = _seconds(model, kv, [tail + fresh], [context + new], tables[:1], repeats,
                      attention)  # fmt: skip
    decode_s = _seconds(model, kv, [[context]] * batch, [context + 1] * batch, tables, repeats,
                        attention)  # fmt: skip
    return {
        "model": model_name, "dtype": "float32", "threads": 1, "attention": attention,
        "context": context,
        "hole": hole, "hole_start": hole_start, "new": new, "batch": batch,
        "repeats": repeats, "hole_s": round(hole_s, 4), "tail_s": round(tail_s, 4),
        "hole_over_tail": round(hole_s / tail_s, 3), "decode_s": round(decode_s, 4),
        "decode_tok_s": round(batch / decode_s, 2),
    }  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("python -m bench.speed.holes", __doc__)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--context", type=int, default=6144, help="history tokens of the turn")
    ap.add_argument("--hole", type=int, default=2048, help="tokens of history recomputed")
    ap.add_argument("--hole-start", type=int, default=2048, help="where the hole begins")
    ap.add_argument("--new", type=int, default=64, help="the turn's new tokens")
    ap.add_argument("--batch", type=int, default=8, help="sequences of the decode step")
    ap.add_argument("--repeats", type=int, default=3, help="timed forwards, after one untimed")
    ap.add_argument("--attention", default="pieces",
                    help="backends to time, a comma list (pieces, sdpa, flex)")  # fmt: skip
    ap.add_argument("--json", default=None, metavar="OUT", help="write the JSON here too")
    return ap


def main(argv: list[str] | None = None) -> int:
    from penelope_engine.model.backends import resolve_backend

    a = build_parser().parse_args(argv)
    backends = [resolve_backend(b.strip(), "cpu") for b in a.attention.split(",")]
    runs = [measure(a.model, a.context, a.hole, a.hole_start, a.new, a.batch, a.repeats, b)
            for b in backends]  # fmt: skip
    text = json.dumps(runs[0] if len(runs) == 1 else runs, indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
