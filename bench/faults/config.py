"""`FaultsConfig`: one `penelope bench faults` option per field, and `--short`'s values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench.checks import one_of, positive
from bench.traces import DEFAULT_TRACE

MODEL = "tiny-qwen3"
APPS = ("serve", "ray")
PORT_BASE = 18320  # moto, the proxy, then one server port per run (this worktree's range)


@dataclass(frozen=True)
class FaultsConfig:
    app: str = field(
        default="serve",
        metadata={
            "help": "what serves each run: serve (`penelope serve`) or ray (the Ray Serve "
            "application, one engine replica, on a one-node Ray cluster of its own)"
        },
    )
    cases: tuple[str, ...] = field(
        default=(), metadata={"help": "cases to run (default: all, `bench.faults.cases`)"}
    )
    concurrency: int = field(default=64, metadata={"help": "concurrent agent sessions"})
    turns: int = field(default=6, metadata={"help": "each session's first turns"})
    before_s: float = field(default=20.0, metadata={"help": "load before the fault"})
    fault_s: float = field(default=60.0, metadata={"help": "how long each fault lasts"})
    slow_s: float = field(
        default=30.0, metadata={"help": "store_slow: seconds at 2 s/call, then at 30 s/call"}
    )
    after_s: float = field(default=30.0, metadata={"help": "load after the fault ends"})
    max_tokens: int = field(default=8, metadata={"help": "cap on each request's output tokens"})
    window_tokens: int = field(default=1024, metadata={"help": "sessions fitting this are drawn"})
    device_pages: int = field(
        default=256, metadata={"help": "small: sessions reload from the store"}
    )
    page_size: int = field(default=16, metadata={"help": "tokens per KV page"})
    max_pending: int = field(default=256, metadata={"help": "the server's admission limit"})
    read_budget_s: float = field(default=0.5, metadata={"help": "store_read_budget_s"})
    request_timeout_s: float = field(default=5.0, metadata={"help": "store_request_timeout_s"})
    write_behind_bytes: int = field(default=16 << 20, metadata={"help": "the write-behind cap"})
    deadline_s: float = field(default=120.0, metadata={"help": "each request's deadline"})
    idle_connections: int = field(default=500, metadata={"help": "clients case: idle sockets"})
    seed: int = field(default=0, metadata={"help": "seed of the sessions' draw"})
    port_base: int = field(default=PORT_BASE, metadata={"help": "first of the ports used"})
    trace: str = field(default=str(DEFAULT_TRACE), metadata={"help": "Claude Code trace file"})

    def __post_init__(self) -> None:
        one_of(self, "app", APPS)
        positive(self, "concurrency", "turns", "max_tokens", "before_s", "fault_s", "slow_s",
                 "after_s", "deadline_s")  # fmt: skip

    @property
    def duration_s(self) -> float:
        """The longest case's load (store_slow has two phases)."""
        return self.before_s + max(self.fault_s, 2 * self.slow_s) + self.after_s


def short(cfg: FaultsConfig) -> FaultsConfig:
    """The test-sized form: a few sessions, seconds-long faults."""
    return dataclasses.replace(
        cfg, concurrency=min(cfg.concurrency, 4), turns=3, before_s=3.0, fault_s=5.0,
        slow_s=3.0, after_s=7.0, idle_connections=50, deadline_s=60.0, device_pages=96,
    )  # fmt: skip
