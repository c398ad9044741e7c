"""`penelope serve` in a child process with an S3 (or local) store, and what it reports.

(`ray_app` is the other server the bench runs, the Ray Serve application.)

The server is started as a user starts it, with the store's options and the
AWS credentials in its environment; the bench reads its `/metrics` and `/ready`
and its resident memory (`/proc/PID/status`) on a sampler thread while the
load runs.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.child import penelope_process
from bench.cluster.s3 import CREDENTIALS
from bench.faults.config import MODEL, FaultsConfig
from bench.sampler import Sampler, rss_mib

START_TIMEOUT_S = 120.0
_SERIES = re.compile(r"^(penelope_[a-z_]+)(?:\{([^}]*)\})? ([0-9.e+-]+)$")


@dataclass(frozen=True)
class StoreTarget:
    uri: str
    endpoint: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class Serving:
    """A server up for one run: where to send, and the process whose memory is sampled
    (the one holding the engine)."""

    url: str
    pid: int
    # how stale its /metrics may be: the Ray ingress exports what engine replicas report
    # every few seconds (a write that resumed shows that much later); 0: read live
    metrics_lag_s: float = 0.0


# Starts a server for one run on `store`: (cfg, port, store, log) -> a context of `Serving`.
ServerFactory = Callable[[FaultsConfig, int, StoreTarget, Path], AbstractContextManager[Serving]]


@contextmanager
def penelope_serve(
    cfg: FaultsConfig, port: int, store: StoreTarget, log: Path
) -> Iterator[Serving]:
    """`penelope serve` up (health answered, one request served) for the block."""
    args = [
        "--model", MODEL, "--device-pages", str(cfg.device_pages),
        "--page-size", str(cfg.page_size), "--max-pending", str(cfg.max_pending),
        "--store-uri", store.uri, "--write-behind-bytes", str(cfg.write_behind_bytes),
        "--store-read-budget-s", str(cfg.read_budget_s),
        "--store-request-timeout-s", str(cfg.request_timeout_s), "--store-probe-s", "1.0",
        "--log-level", "warning",
    ]  # fmt: skip
    if store.endpoint:
        args += ["--store-endpoint", store.endpoint, "--store-region", store.region or ""]
    env = {**os.environ, **CREDENTIALS, "OMP_NUM_THREADS": "1"}
    env.pop("AWS_ENDPOINT_URL", None)
    serving = penelope_process(args, log, START_TIMEOUT_S, port=port, env=env, grace_s=30.0)
    with serving as (url, proc):
        warm = {"model": MODEL, "prompt": [1, 2, 3, 4], "max_tokens": 2}  # first-call costs
        httpx.post(f"{url}/v1/completions", json=warm, timeout=START_TIMEOUT_S).raise_for_status()
        yield Serving(url, proc.pid)


def scrape(url: str) -> dict[str, float]:
    """Every penelope_* series of /metrics, keyed `name{labels}` (replica label dropped)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SERIES.match(line)
        if m:
            labels = ",".join(p for p in (m.group(2) or "").split(",") if p and "replica" not in p)
            key = f"{m.group(1)}{{{labels}}}" if labels else m.group(1)
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


@dataclass
class Watch:
    """Samples of the server: (seconds since start, metrics, /ready's store field, RSS)."""

    samples: list[tuple[float, dict[str, float], str, float]] = field(default_factory=list)


class ServerSampler(Sampler):
    def __init__(self, url: str, pid: int, period_s: float = 0.5) -> None:
        super().__init__(period_s, "faults-sampler")
        self.url, self.pid, self.watch = url, pid, Watch()

    def sample(self) -> None:
        try:
            metrics = scrape(self.url)
            ready = httpx.get(f"{self.url}/ready", timeout=10).json().get("store", "?")
        except (httpx.HTTPError, ValueError):
            metrics, ready = {}, "unanswered"
        now = time.monotonic() - self.t0
        self.watch.samples.append((now, metrics, ready, rss_mib(self.pid)))
