"""The faults, each run on a thread while the load runs: a registry of name -> `Case`.

A case's `inject(ctx)` starts at the load's `before_s`, applies its fault and
returns when the fault is over; the times it returns (seconds since the load
began) split the turns into before, during and after.

    store_unreachable  moto stopped for fault_s, then started on the same data
    store_slow         every store call +2 s for slow_s, then +30 s (past every timeout)
    store_throttle     503 SlowDown on half the store calls for fault_s
    store_full         a local store on a 2 MiB tmpfs: it fills mid-run
    segment_corrupt    stored segments altered on disk (a byte flipped) or cut in half
    clients            idle keep-alive sockets, a byte-a-second body, streams not read,
                       prompts at the window's edge, a burst of 10x the admission limit
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from bench.faults.config import FaultsConfig
from bench.faults.proxy import Fault, FaultProxy
from bench.faults.s3 import RestartableS3
from cache_store import StoreLocation


@dataclass
class Context:
    cfg: FaultsConfig
    s3: RestartableS3
    proxy: FaultProxy
    bucket: StoreLocation | None  # the S3 store's location (None: a local store)
    local_dir: Path | None
    url: str
    t0: float  # the load's start (time.monotonic())
    notes: dict[str, Any] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.t0


@dataclass(frozen=True)
class Case:
    inject: Callable[[Context], tuple[float, float]]  # -> (fault start, fault end)
    store: str = "s3"  # "s3" (through the proxy) or "tmpfs" (a small local volume)
    doc: str = ""


def _unreachable(ctx: Context) -> tuple[float, float]:
    start = ctx.now()
    ctx.s3.stop()
    time.sleep(ctx.cfg.fault_s)
    ctx.s3.start()
    return start, ctx.now()


def _on_proxy(ctx: Context, *steps: tuple[Fault, float]) -> tuple[float, float]:
    """Each fault on the store proxy in turn for its seconds, then none."""
    start = ctx.now()
    for fault, seconds in steps:
        ctx.proxy.set(fault)
        time.sleep(seconds)
    ctx.proxy.set(Fault())
    return start, ctx.now()


def _slow(ctx: Context) -> tuple[float, float]:
    slow_s = ctx.cfg.slow_s
    return _on_proxy(ctx, (Fault(delay_s=2.0), slow_s), (Fault(delay_s=30.0), slow_s))


def _throttle(ctx: Context) -> tuple[float, float]:
    return _on_proxy(ctx, (Fault(slowdown=0.5), ctx.cfg.fault_s))


def _full(ctx: Context) -> tuple[float, float]:
    """The volume fills by itself under the load; the fault is the whole load after before_s."""
    start = ctx.now()
    time.sleep(ctx.cfg.fault_s)
    return start, ctx.now()


def _corrupt(ctx: Context) -> tuple[float, float]:
    """For fault_s (longer until two are damaged), every second: each stored segment not
    yet damaged is altered, even ones a byte flipped mid-file, odd ones cut in half,
    while the server reads them."""
    assert ctx.bucket is not None
    start = ctx.now()
    fs = pafs.S3FileSystem(
        endpoint_override=ctx.s3.endpoint.removeprefix("http://"), scheme="http",
        region=ctx.bucket.region,
    )  # fmt: skip
    root = ctx.bucket.uri.removeprefix("s3://")
    damaged: set[str] = set()
    last = start + ctx.cfg.fault_s + ctx.cfg.after_s / 2  # on a slow machine, writes lag
    while ctx.now() < start + ctx.cfg.fault_s or (len(damaged) < 2 and ctx.now() < last):
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        for info in infos:
            if info.type != pafs.FileType.File or not info.path.endswith(".arrow"):
                continue
            if info.path in damaged or "/quarantine/" in info.path:
                continue
            with fs.open_input_stream(info.path) as f:
                data = bytearray(f.read())
            if len(damaged) % 2 == 0:
                data[len(data) // 2] ^= 0xFF
            else:
                data = data[: len(data) // 2]
            with fs.open_output_stream(info.path) as f:
                f.write(bytes(data))
            damaged.add(info.path)
        time.sleep(1.0)
    ctx.notes["segments_damaged"] = len(damaged)
    return start, ctx.now()


def _clients(ctx: Context) -> tuple[float, float]:
    from bench.faults.clients import misbehave

    start = ctx.now()
    ctx.notes["clients"] = misbehave(ctx.url, ctx.cfg)
    return start, ctx.now()


CASES: dict[str, Case] = {
    "store_unreachable": Case(_unreachable, doc="moto stopped for fault_s, restarted on its data"),
    "store_slow": Case(_slow, doc="+2 s per store call for slow_s, then +30 s per call"),
    "store_throttle": Case(_throttle, doc="503 SlowDown on half the store calls for fault_s"),
    "store_full": Case(_full, store="tmpfs", doc="a local store on a 2 MiB tmpfs that fills"),
    "segment_corrupt": Case(_corrupt, doc="stored segments: a byte flipped, or cut in half"),
    "clients": Case(_clients, doc="idle sockets, slow bodies, unread streams, edge, burst"),
}
SHORT_CASES = ("store_unreachable", "store_slow", "segment_corrupt")  # `make test`'s
