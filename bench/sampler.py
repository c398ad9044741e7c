"""`Sampler`: one measurement now and then every `period_s` on a thread, while entered.

The benches' samplers (a server tree's CPU seconds, this process's RSS, the
running replica count) are this loop with their own `sample()`; the first
sample is taken in `__enter__`, so a reading exists as soon as the block
starts, and `__exit__` waits a bounded time for the thread. `rss_mib` and
`cpu_fields` are what they read of this machine: a process's resident memory,
and the CPU's model and flags.
"""

from __future__ import annotations

import resource
import threading
import time
from pathlib import Path
from typing import Any, Self


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident memory in MiB (`/proc/PID/statm`)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def cpu_fields() -> dict[str, str]:
    """The first processor's `/proc/cpuinfo` fields (none where it cannot be read)."""
    fields: dict[str, str] = {}
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return fields
    for key, _, value in (line.partition(":") for line in lines if ":" in line):
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_info() -> dict[str, Any]:
    """The CPU model and flags (the first processor's, /proc/cpuinfo), and its vector ones."""
    fields = cpu_fields()
    flags = fields.get("flags", "").split()
    vector = [f for f in flags if f.startswith(("avx", "amx", "fma", "sse4", "f16c"))]
    return {"model": fields.get("model name"), "vector_flags": vector, "flags": flags}


class Sampler:
    def __init__(self, period_s: float, name: str) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self.period_s = period_s
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> None:
        """Take one measurement (runs on the sampling thread after the first)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.t0 = time.monotonic()
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10 * self.period_s + 5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()
