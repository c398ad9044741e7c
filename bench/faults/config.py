"""`FaultsConfig`: one `penelope bench faults` option per field, and `--short`'s values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bench.config import one_of, option, positive
from bench.traces import DEFAULT_TRACE

MODEL = "tiny-qwen3"
APPS = ("serve", "ray")
PORT_BASE = 18320  # moto, the proxy, then one server port per run (this worktree's range)


@dataclass(frozen=True)
class FaultsConfig:
    app: str = option(
        "serve",
        "what serves each run: serve (`penelope serve`) or ray (the Ray Serve "
        "application, one engine replica, on a one-node Ray cluster of its own)",
    )
    cases: tuple[str, ...] = option((), "cases to run (default: all, `bench.faults.cases`)")
    concurrency: int = option(64, "concurrent agent sessions")
    turns: int = option(6, "each session's first turns")
    before_s: float = option(20.0, "load before the fault")
    fault_s: float = option(60.0, "how long each fault lasts")
    slow_s: float = option(30.0, "store_slow: seconds at 2 s/call, then at 30 s/call")
    after_s: float = option(30.0, "load after the fault ends")
    max_tokens: int = option(8, "cap on each request's output tokens")
    window_tokens: int = option(1024, "sessions fitting this are drawn")
    device_pages: int = option(256, "small: sessions reload from the store")
    page_size: int = option(16, "tokens per KV page")
    max_pending: int = option(256, "the server's admission limit")
    read_budget_s: float = option(0.5, "store_read_budget_s")
    request_timeout_s: float = option(5.0, "store_request_timeout_s")
    write_behind_bytes: int = option(16 << 20, "the write-behind cap")
    deadline_s: float = option(120.0, "each request's deadline")
    idle_connections: int = option(500, "clients case: idle sockets")
    seed: int = option(0, "seed of the sessions' draw")
    port_base: int = option(PORT_BASE, "first of the ports used")
    trace: str = option(str(DEFAULT_TRACE), "Claude Code trace file")

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
