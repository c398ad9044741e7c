"""`penelope bench cache-ops`: the cache's own bookkeeping per request.

Builds a tree of S sessions of L tokens each (one shared prefix, page size
16) in a device pool smaller than all of it, then serves agent turns: each
turn hashes its prompt, matches, locks, allocates its new pages (evicting by
the policy), inserts and unlocks. Reports p50/p99 microseconds per operation
and per request ("request" is the bookkeeping, match to unlock; hashing the
prompt is listed apart). No model runs: this is the scheduler's overhead alone.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from penelope_cli.helpformat import parser
from penelope_engine.cache.pages import PageHasher
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.tier import Tier

OPS = ("hash", "match", "lock", "allocate", "insert", "unlock")


def _turn(
    cache: PrefixCache,
    hasher: PageHasher,
    tokens: np.ndarray,
    sid: str,
    times: dict[str, list[float]],
) -> None:
    t0 = time.perf_counter()
    hashes = hasher.hashes(tokens)
    t1 = time.perf_counter()
    m = cache.match(hashes)
    t2 = time.perf_counter()
    handle = cache.lock(m.nodes[-1] if m.num_pages else None)
    t3 = time.perf_counter()
    missing = len(hashes) - int((m.where == Tier.DEVICE).sum())
    fresh = cache.allocate(missing)
    t4 = time.perf_counter()
    pages = np.empty(len(hashes), dtype=np.int32)
    dev = np.zeros(len(hashes), dtype=bool)
    dev[: m.num_pages] = m.where == Tier.DEVICE
    pages[dev] = m.device[dev[: m.num_pages]]
    pages[~dev] = fresh
    cache.insert(hashes, pages, sid)
    t5 = time.perf_counter()
    cache.unlock(handle)
    t6 = time.perf_counter()
    for op, dt in zip(OPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
        times[op].append(dt * 1e6)
    times["request"].append((t6 - t1) * 1e6)
    times["request_with_hash"].append((t6 - t0) * 1e6)


def run(
    sessions: int = 500,
    tokens: int = 100_000,
    shared: int = 17_000,
    turns: int = 2000,
    turn_tokens: int = 1024,
    device_fraction: float = 0.8,
    policy: str = "penelope",
    page_size: int = 16,
    seed: int = 0,
) -> dict:
    rng = np.random.default_rng(seed)
    shared = min(shared, tokens // 2)
    total_pages = sessions * (tokens + turns * turn_tokens // sessions) // page_size
    cache = PrefixCache(
        page_size, int(total_pages * device_fraction), policy=policy, time_fn=time.monotonic
    )
    hasher = PageHasher(page_size, "bench")
    prefix = rng.integers(0, 150_000, shared)
    hist = {
        s: np.concatenate([prefix, rng.integers(0, 150_000, tokens - shared)])
        for s in range(sessions)
    }
    warm: dict[str, list[float]] = {op: [] for op in (*OPS, "request", "request_with_hash")}
    for s in range(sessions):
        _turn(cache, hasher, hist[s], f"s{s}", warm)
    times: dict[str, list[float]] = {op: [] for op in (*OPS, "request", "request_with_hash")}
    for _ in range(turns):
        s = int(rng.integers(sessions))
        hist[s] = np.concatenate([hist[s], rng.integers(0, 150_000, turn_tokens)])
        _turn(cache, hasher, hist[s], f"s{s}", times)
    cache.check_integrity()
    pct = {
        op: {"p50_us": float(np.percentile(v, 50)), "p99_us": float(np.percentile(v, 99))}
        for op, v in times.items()
    }
    return {
        "sessions": sessions,
        "tokens_per_session": tokens,
        "page_size": page_size,
        "device_pages": cache.device.capacity,
        "policy": policy,
        "turns": turns,
        "ops": pct,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope bench cache-ops", __doc__)
    ap.add_argument("--sessions", type=int, default=500, help="sessions S in the tree")
    ap.add_argument("--tokens", type=int, default=100_000, help="tokens L per session")
    ap.add_argument("--turns", type=int, default=2000, help="agent turns served and timed")
    ap.add_argument("--policy", default="penelope", help="eviction policy")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    r = run(args.sessions, args.tokens, turns=args.turns, policy=args.policy)
    print(json.dumps(r))
    if not args.json:
        print(f"{'op':10s} {'p50 us':>10s} {'p99 us':>10s}")
        for op, v in r["ops"].items():
            print(f"{op:10s} {v['p50_us']:10.1f} {v['p99_us']:10.1f}")
    return 0
