"""Autoscaling under load, observed: a load ramp takes the fleet up, and it comes down after.

The application is redeployed with autoscaling from one replica (at most two,
one per node; delays of seconds, `deployments.metrics.autoscaling_policy:KvAwarePolicy`
as in `serve_config.yaml`). `bench.load`'s client ramps its session slots up
over `ramp_s` and keeps them busy for `load_s` (in a spawned process, under a
deadline), while this process records the running engine replicas every
second; then, with no load, it waits for the fleet to come back down.

Which signal fired is read from the Serve controller's own log: each
"Upscaling ... from N to M replicas. Current ongoing requests: X" line is
`queue` when X / target_ongoing_requests alone asks for M, else `kv_pressure`
(the policy's other term). Pages drained to the store are counted from the
leaving replicas' "drained N KV pages" log lines (`EngineReplica.__del__`), and
the sessions they could not drain read from their "could not drain session"
lines.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

from bench.child import run_child
from bench.cluster import app
from bench.load.config import LoadConfig
from bench.sampler import Sampler

SAMPLE_S = 1.0
UPSCALE = re.compile(
    r"Upscaling .*PenelopeEngine.* from (\d+) to (\d+) replicas\. "
    r"Current ongoing requests: ([\d.]+)"
)
DRAINED = re.compile(r"drained (\d+) KV pages to the store")
UNDRAINED = re.compile(r"could not drain session (\S+) to the store: (.+)$", re.MULTILINE)


def _log_lines(logs_dir: Path, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    found = []
    for path in sorted(logs_dir.rglob("*")):
        if path.is_file() and path.suffix in (".log", ".err", ".out"):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            found += list(pattern.finditer(text))
    return found


def dir_bytes(path: Path) -> int:
    """Bytes of the files under `path` (a local store directory)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def drained_pages(logs_dir: Path) -> int:
    """Pages every replica that left so far drained to the store, from their logs."""
    return sum(int(m.group(1)) for m in _log_lines(logs_dir, DRAINED))


def undrained(logs_dir: Path) -> list[dict[str, str]]:
    """Every session a leaving replica said it could not drain so far, with why."""
    return [{"session": m.group(1), "why": m.group(2)} for m in _log_lines(logs_dir, UNDRAINED)]


def signals(logs_dir: Path, target: float) -> list[dict[str, Any]]:
    """Each upscale decision in the controller's log, and the signal that made it."""
    out = []
    for m in _log_lines(logs_dir / "serve", UPSCALE):
        old, new, ongoing = int(m.group(1)), int(m.group(2)), float(m.group(3))
        queue = math.ceil(ongoing / target) if ongoing > 0 else 0
        out.append({"from": old, "to": new, "ongoing_requests": ongoing,
                    "signal": "queue" if queue >= new else "kv_pressure"})  # fmt: skip
    return out


class ReplicaSampler(Sampler):
    """Running engine replicas every SAMPLE_S, in a thread: (seconds since start, count)."""

    def __init__(self) -> None:
        super().__init__(SAMPLE_S, "replica-sampler")
        self.samples: list[tuple[float, int]] = []
        self.failures: list[str] = []  # samples the controller did not answer: why (reported)

    def now(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def sample(self) -> None:
        try:
            running = app.app_state()[1].get("RUNNING", 0)
        except Exception as exc:  # the controller busy or restarting: counted and reported
            self.failures.append(f"{round(time.monotonic() - self.t0, 1)} s: {exc!r}"[:300])
            return
        self.samples.append((round(time.monotonic() - self.t0, 1), running))


def load_config(sessions: int, ramp_s: float, load_s: float, trace: str) -> LoadConfig:
    return LoadConfig(
        sessions=sessions, duration_s=ramp_s + load_s, ramp_s=ramp_s, time_scale=0.02,
        max_tokens=8, cancel_share=0.0, malformed_share=0.0, grace_s=30.0, trace=trace,
    )  # fmt: skip


def ramp(url: str, logs_dir: Path, load: LoadConfig, vocab: int, target: float,
         settle_timeout_s: float) -> dict[str, Any]:  # fmt: skip
    """The load ramp, then the wait for the fleet to scale back down; the `autoscale` entry."""
    from bench.load.client import client_deadline_s, client_main, summarize

    drained_before, undrained_before = drained_pages(logs_dir), len(undrained(logs_dir))
    with ReplicaSampler() as sampler:
        records = run_child(
            client_main, (load, url, vocab), timeout_s=client_deadline_s(load), name="ramp-client"
        )
        peak = max((n for _, n in sampler.samples), default=0)
        deadline = time.monotonic() + settle_timeout_s
        while sampler.now() >= peak and peak > 1 and time.monotonic() < deadline:
            time.sleep(SAMPLE_S)
        time.sleep(2 * SAMPLE_S)
    samples = sampler.samples
    load_summary = summarize(records)
    fired = signals(logs_dir, target)
    return {
        "min_replicas": samples[0][1] if samples else None,
        "max_replicas_seen": max((n for _, n in samples), default=0),
        "scaled_down": bool(samples) and samples[-1][1] < max(n for _, n in samples),
        "drained_pages": drained_pages(logs_dir) - drained_before,
        "undrained": undrained(logs_dir)[undrained_before:],
        "signal": sorted({f["signal"] for f in fired}),
        "upscales": fired,
        "replicas_over_time": _changes(samples),
        "unanswered_samples": len(sampler.failures),
        "unanswered_first": sampler.failures[:3],
        "requests": load_summary["total"],
        "server_errors": load_summary["server_errors"],
        "statuses": load_summary["by_status"],
    }


def _changes(samples: list[tuple[float, int]]) -> list[list[float]]:
    """[seconds, replicas] at the start, at each change, and at the end."""
    out: list[list[float]] = []
    for i, (t, n) in enumerate(samples):
        if not out or out[-1][1] != n or i == len(samples) - 1:
            out.append([t, n])
    return out
