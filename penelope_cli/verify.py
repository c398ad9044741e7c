"""`penelope verify`: recomputing holes is exact, in the decoder and through the whole engine.

Fused (--cases): sessions with holes in their cached history recompute the
holes and their new tokens in one forward, against a full prefill; a NaN
anywhere fails (verify_fused.py).

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
from pathlib import Path
from typing import Any

import numpy as np

from penelope_cli.closeness import worst
from penelope_cli.helpformat import parser
from penelope_cli.verify_engine import run_engine, run_reference
from penelope_cli.verify_fused import run_fused
from penelope_engine.config import WEIGHT_NAMES, DType, Weights
from penelope_engine.model.backends import ATTENTION_BACKENDS, resolve_backend
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.tiers.kv_pool import DTYPES

REFERENCES = ("none", "transformers")


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
    weights: Weights = "float",
    text: str | None = None,
) -> dict:
    """Run the checks; the report as plain data (NaN and infinite differences as floats).
    The fused passes and the tight engine attend with `attention`; the full prefills and
    the engine's from-scratch turns with the reference (`sdpa`)."""
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    lm = load_model(model, dtype, device, weights)
    result: dict[str, Any] = {
        "cases": cases,
        "attention": resolve_backend(attention, device),
        "dtype": dtype,
        "weights": weights,
    }
    sections: dict[str, dict] = {}
    if cases > 0:
        ids = None if text is None else np.array(lm.tokenizer.encode(Path(text).read_text()))
        sections["fused"] = run_fused(
            lm, cases, page_size, seed, dtype, device, tolerance, attention, ids
        )
        sections["fused"]["tokens"] = "random" if text is None else f"text: {text}"
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
    ap.add_argument(
        "--weights",
        default="float",
        choices=WEIGHT_NAMES,
        help="linear-layer weights: float (in --dtype), int8 or int4 (decode rows quantized)",
    )
    ap.add_argument(
        "--text",
        default=None,
        metavar="FILE",
        help="fused check: cases over windows of this text's tokens (default: random ids)",
    )
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
        args.weights,
        args.text,
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
