"""The load bench's settings (`LoadConfig`, one option each) and the model it serves."""

from __future__ import annotations

from dataclasses import dataclass

from bench.sessions import Scale
from bench.traces import CLAUDE_BLOCK, DEFAULT_TRACE

MODEL = "tiny-qwen3"


@dataclass(frozen=True)
class LoadConfig:
    sessions: int = 200  # concurrent session slots; a slot that runs out starts the next session
    duration_s: float = 120.0  # no turn starts after this; in-flight requests get `grace_s`
    length_scale: float = 1 / 256
    time_scale: float = 0.1  # tool times x this
    max_tokens: int = 16
    stream_share: float = 0.5
    cancel_share: float = 0.1
    malformed_share: float = 0.05
    ramp_s: float = 10.0  # slot i starts at i * ramp_s / sessions
    # Memory is compared between the end of warm-up and the end of the run. Warm-up
    # lasts at least this long and until the device pool is first full: the tree
    # and its page tables grow while the cache fills, then must stay flat.
    warmup_s: float = 30.0
    grace_s: float = 60.0
    device_pages: int = 8192
    page_size: int = 16
    threads: int = 1
    seed: int = 0
    trace: str = str(DEFAULT_TRACE)

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.duration_s <= 0 or self.max_tokens < 1:
            raise ValueError("sessions, duration_s and max_tokens must be positive")
        if not 0 < self.length_scale <= 1 or self.time_scale <= 0:
            raise ValueError("length_scale must be in (0, 1] and time_scale positive")
        for share in (self.stream_share, self.cancel_share, self.malformed_share):
            if not 0 <= share <= 1:
                raise ValueError(f"shares must be in [0, 1], got {share}")

    @property
    def trace_scale(self) -> Scale:
        return Scale(max(self.length_scale, 1 / CLAUDE_BLOCK), self.time_scale)

    @property
    def stride(self) -> int:
        """Keep every stride-th token: the part of the length scale below one token per block."""
        return max(1, round(self.trace_scale.length / self.length_scale))
