"""The load bench's settings (`LoadConfig`, one option each) and the model it serves."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import option, positive, shares
from bench.sessions import Scale
from bench.traces import CLAUDE_BLOCK, DEFAULT_TRACE

MODEL = "tiny-qwen3"


@dataclass(frozen=True)
class LoadConfig:
    """One `penelope bench load` option per field; its help is the field's `help` metadata."""

    sessions: int = option(
        200, "concurrent session slots; a slot that runs out starts the next session"
    )
    duration_s: float = option(
        120.0, "no turn starts after this; in-flight requests then get --grace-s"
    )
    length_scale: float = option(
        1 / 256, "trace lengths x this (below 1/64: every k-th token of each turn)"
    )
    time_scale: float = option(0.1, "tool times x this")
    max_tokens: int = option(16, "cap on each request's output tokens")
    stream_share: float = option(0.5, "share of turns streamed to the end")
    cancel_share: float = option(0.1, "share of turns streamed and cancelled after the first chunk")
    malformed_share: float = option(0.05, "chance of a malformed extra request before each turn")
    ramp_s: float = option(10.0, "slot i starts at i * ramp-s / sessions")
    # Memory is compared between the end of warm-up and the end of the run. Warm-up
    # lasts at least this long and until the device pool is first full: the tree
    # and its page tables grow while the cache fills, then must stay flat.
    warmup_s: float = option(
        30.0, "least warm-up before the memory baseline (and until the device pool is full)"
    )
    grace_s: float = option(60.0, "seconds in-flight requests get after --duration-s")
    device_pages: int = option(8192, "the server's device KV pages")
    page_size: int = option(16, "tokens per KV page")
    threads: int = option(1, "the server's torch threads")
    seed: int = option(0, "seed of every slot's draws")
    trace: str = option(str(DEFAULT_TRACE), "Claude Code trace file")

    def __post_init__(self) -> None:
        positive(self, "sessions", "duration_s", "max_tokens", "time_scale")
        shares(self, "stream_share", "cancel_share", "malformed_share")
        if not 0 < self.length_scale <= 1:
            raise ValueError(f"length_scale must be in (0, 1], got {self.length_scale}")

    @property
    def trace_scale(self) -> Scale:
        return Scale(max(self.length_scale, 1 / CLAUDE_BLOCK), self.time_scale)

    @property
    def stride(self) -> int:
        """Keep every stride-th token: the part of the length scale below one token per block."""
        return max(1, round(self.trace_scale.length / self.length_scale))
