"""The figures of one side in one run: prefill / TTFT, decode at batch 1 and B, a session.

Every figure is read twice: on the wall clock and on the server tree's CPU
clock (`CpuClock`), over the same window:

    prefill   request sent .. first token      prompt_tokens / window
    decode    all streams past their first token .. the first stream's last
              token; tokens arriving inside the window / window. Each stream's
              prompt is prefilled first, one at a time (four tokens asked), so the
              streams start from cache together: at thousands of tokens of context
              a server that prefills one prompt at a time would otherwise finish the
              first stream before the last one starts
    session   per turn: request sent .. first token, and the cached tokens
              the server reports (`usage.prompt_tokens_details`)

`ttft_2k_s_per_cpu_s` is the TTFT on the CPU clock: the CPU seconds the
server spent until the first token (lower is better, like `ttft_2k_s`).
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.speed.client import Stream, complete
from bench.speed.config import SpeedConfig
from bench.speed.cpu import CpuClock


@dataclass(frozen=True)
class Side:
    name: str  # "ours" or "theirs"
    url: str
    model: str
    clock: CpuClock


def prompt(cfg: SpeedConfig, n: int, *key: object) -> list[int]:
    """`n` token ids drawn from a seed named by `key`, so both sides get the same prompt."""
    rng = random.Random(repr((cfg.seed, *key)))
    return [rng.randrange(cfg.vocab_low, cfg.vocab_high) for _ in range(n)]


def prefill(side: Side, cfg: SpeedConfig, run: int) -> dict[str, float]:
    s = complete(side.url, side.model, prompt(cfg, cfg.prompt_tokens, "prefill", run), 1,
                 cfg.request_timeout_s)  # fmt: skip
    if s.cached_tokens:  # e.g. a second bench against the same long-lived peer
        raise RuntimeError(
            f"{side.name}: {s.cached_tokens} tokens of the fresh prompt were cached, so this "
            "is no prefill figure: pass another --seed or restart that server"
        )
    cpu = side.clock.between(s.sent, s.chunk_times[0])
    return {
        "prefill_tok_s": cfg.prompt_tokens / s.ttft_s,
        "ttft_2k_s": s.ttft_s,
        "prefill_tok_s_per_cpu_s": cfg.prompt_tokens / cpu,
        "ttft_2k_s_per_cpu_s": cpu,
    }


def concurrent_streams(
    side: Side, cfg: SpeedConfig, run: int, batch: int
) -> tuple[list[list[int]], list[Stream]]:
    """`batch` streams at once, each over a prompt prefilled first on its own."""
    prompts = [prompt(cfg, cfg.decode_prompt_tokens, "decode", batch, run, i) for i in range(batch)]
    for p in prompts:  # a few tokens: a single one may decode to no text (a partial byte)
        complete(side.url, side.model, p, 4, cfg.request_timeout_s)
    with ThreadPoolExecutor(batch) as pool:
        streams = list(
            pool.map(
                lambda p: complete(
                    side.url, side.model, p, cfg.decode_tokens, cfg.request_timeout_s
                ),  # fmt: skip
                prompts,
            )
        )
    return prompts, streams


def decode(side: Side, cfg: SpeedConfig, run: int, batch: int) -> tuple[float, float]:
    """Total tokens/s over `batch` concurrent streams, on the wall and the CPU clock."""
    prompts, streams = concurrent_streams(side, cfg, run, batch)
    uncached = [len(p) - s.cached_tokens for p, s in zip(prompts, streams)]
    if max(uncached) > max(64, len(prompts[0]) // 8):  # room for a partial last block
        raise RuntimeError(
            f"{side.name}, batch {batch}, run {run}: the streams' prompts were prefilled first, "
            f"yet {max(uncached)} tokens of one were not cached: turn on prefix caching"
        )
    try:
        start, end, tokens = decode_window(streams)
    except RuntimeError as exc:
        t0 = min(s.sent for s in streams)
        spans = [(round(s.chunk_times[0] - t0, 2), round(s.chunk_times[-1] - t0, 2),
                  s.completion_tokens, s.finish_reason) for s in streams]  # fmt: skip
        raise RuntimeError(f"{side.name}, batch {batch}, run {run}: {exc}; streams "
                           f"(first, last token s, tokens, finish): {spans}") from None  # fmt: skip
    return tokens / (end - start), tokens / side.clock.between(start, end)


def decode_window(streams: list[Stream]) -> tuple[float, float, int]:
    """(start, end, tokens): every stream decodes between start and end."""
    start = max(s.chunk_times[0] for s in streams)
    end = min(s.chunk_times[-1] for s in streams)
    if end <= start:
        raise RuntimeError(
            "a stream ended before every stream had its first token: ask for more tokens"
        )
    tokens = sum(1 for s in streams for t in s.chunk_times if start < t <= end)
    return start, end, tokens


def session(side: Side, cfg: SpeedConfig, run: int) -> list[dict[str, Any]]:
    ids = prompt(cfg, cfg.shared_tokens, "session", run, 0)
    turns = []
    for turn in range(cfg.turns):
        if turn:
            ids = ids + prompt(cfg, cfg.turn_tokens, "session", run, turn)
        s = complete(side.url, side.model, ids, cfg.turn_max_tokens, cfg.request_timeout_s,
                     session=f"speed-{cfg.seed}-{run}")  # fmt: skip
        turns.append(
            {
                "turn": turn + 1,
                "prompt_tokens": len(ids),
                "ttft_s": s.ttft_s,
                "ttft_cpu_s": side.clock.between(s.sent, s.chunk_times[0]),
                "cached_tokens": s.cached_tokens,
            }
        )
    return turns


def run_side(side: Side, cfg: SpeedConfig, run: int) -> dict[str, Any]:
    """Every figure of `side` for run `run`."""
    out: dict[str, Any] = prefill(side, cfg, run)
    out["decode_b1_tok_s"], out["decode_b1_tok_s_per_cpu_s"] = decode(side, cfg, run, 1)
    key = f"decode_b{cfg.batch}_tok_s"
    out[key], out[f"{key}_per_cpu_s"] = decode(side, cfg, run, cfg.batch)
    out["session"] = session(side, cfg, run)
    return out


def warm_up(side: Side, cfg: SpeedConfig) -> None:
    """A short request, then one stream and a batch of every size the figures use, untimed:
    lazy set-up (a server that compiles or captures graphs per batch size, as vLLM's
    compiled mode does) is not charged to a figure, nor breaks its decode window."""
    complete(side.url, side.model, prompt(cfg, 32, "warm"), 4, cfg.request_timeout_s)
    for batch in sorted({1, min(2, cfg.batch), cfg.batch}):
        concurrent_streams(side, cfg, -1 - batch, batch)
