"""`penelope bench tiers`: agent sessions through device, host and store, exactly.

Replays the first turns of real Claude Code sessions (lengths scaled to the
tiny Qwen3's window by one stated factor), round-robin, on an engine whose
device pool holds a fraction of the working set and whose host pool is
smaller still, so pages are demoted, spilled to a local Arrow store and loaded
back. The same turns run on an engine that never evicts; every generated
token must match.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from bench.sessions import Scale
from bench.tokens import TokenMap
from bench.traces import DEFAULT_TRACE, load_claude_code
from penelope_cli.helpformat import parser
from penelope_engine.config import CacheConfig, EngineConfig, EvictionPolicyName
from penelope_engine.engine import Engine
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.util import cdiv


def trace_prompts(
    path: Path, sessions: int, turns: int, length_scale: float, vocab: int
) -> list[tuple[str, tuple[int, ...], str]]:
    """(session id, prompt ids, stop reason) of the first turns, round-robin over sessions."""
    trace = load_claude_code(path, Scale(length=length_scale), limit=sessions)
    tm = TokenMap(vocab)
    chosen = [s for s in trace.sessions if s.parent_id is None][:sessions]
    out = []
    for k in range(turns):
        for s in chosen:
            if k < len(s.turns):
                ids = tuple(int(t) for t in tm.input_ids(s, k))
                out.append((s.id, ids, s.turns[k].stop_reason or "tool_use"))
    return out


def replay(lm: LoadedModel, prompts, cache: CacheConfig, max_tokens: int) -> tuple[list, Engine]:
    engine = Engine(EngineConfig(cache=cache), loaded=lm)
    outs = []
    for i, (sid, ids, stop) in enumerate(prompts):
        req = GenerateRequest(
            f"t{i}",
            ids,
            SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            session_id=sid,
            stop_reason_hint=stop,
        )
        outs.append(engine.generate_sync(req).token_ids)
        engine.check_integrity()
    return outs, engine


def run(
    trace: Path = DEFAULT_TRACE,
    sessions: int = 6,
    turns: int = 4,
    length_scale: float = 1 / 64,
    device_fraction: float = 0.3,
    host_fraction: float = 0.6,
    max_tokens: int = 4,
    policy: EvictionPolicyName = "penelope",
    store_dir: str | None = None,
) -> dict:
    lm = load_model("tiny-qwen3")
    prompts = trace_prompts(trace, sessions, turns, length_scale, lm.config.vocab_size)
    ps = 16
    pages: dict[str, int] = {}
    for sid, p, _ in prompts:
        pages[sid] = max(pages.get(sid, 0), cdiv(len(p) + max_tokens, ps))
    working = sum(pages.values())  # every session's longest turn, shared prefix counted each time
    ref, _ = replay(lm, prompts, CacheConfig(page_size=ps, device_pages=working + 8), max_tokens)
    longest = max(pages.values()) + 4
    device = max(longest, int(working * device_fraction))
    host = max(longest, int(working * host_fraction))
    with tempfile.TemporaryDirectory() as tmp:
        cache = CacheConfig(
            page_size=ps,
            device_pages=device,
            host_pages=host,
            policy=policy,
            store_uri=store_dir or tmp,
        )
        outs, engine = replay(lm, prompts, cache, max_tokens)
        s = engine.stats()
        engine.close()  # its store writes behind end before the store's directory goes
    return {
        "device_tokens": s.tokens.device_tokens,
        "host_tokens": s.tokens.host_tokens,
        "store_tokens": s.tokens.store_tokens,
        "recomputed_tokens": s.tokens.recomputed_tokens,
        "new_tokens": s.tokens.new_tokens,
        "exact": outs == ref,
        "requests": len(prompts),
        "device_pages": device,
        "host_pages": host,
        "working_set_pages": working,
        "length_scale": length_scale,
        "policy": policy,
        "threads": torch.get_num_threads(),
    }


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench tiers", __doc__)
    ap.add_argument("--trace-file", type=Path, default=DEFAULT_TRACE, help="Claude Code trace")
    ap.add_argument("--sessions", type=int, default=6, help="sessions replayed")
    ap.add_argument("--turns", type=int, default=4, help="first turns of each session")
    ap.add_argument("--length-scale", type=float, default=1 / 64, help="trace lengths x this")
    ap.add_argument("--policy", default="penelope", help="eviction policy")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    r = run(
        args.trace_file,
        args.sessions,
        args.turns,
        args.length_scale,
        policy=args.policy,
    )
    print(json.dumps(r))
    if not args.json:
        print(
            f"exact={r['exact']}  device {r['device_tokens']}  host {r['host_tokens']}  "
            f"store {r['store_tokens']}  recomputed {r['recomputed_tokens']}  new {r['new_tokens']}"
        )
    return 0 if r["exact"] else 1
