"""CPU seconds of a server's process tree (psutil), sampled on a thread for any instant.

`CpuClock.at(t)` interpolates the tree's user + system CPU seconds at a
`time.monotonic()` instant between two samples, so a figure can be charged
the CPU of exactly its window (first token to last token, say) on a machine
that other work shares: per CPU-second figures are the fair ones there.
"""

from __future__ import annotations

import bisect
import threading
import time

from bench.sampler import Sampler


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:  # a child that just exited
            continue
        total += t.user + t.system
    return total


class CpuClock(Sampler):
    """Samples `tree_cpu_s(pid)` every `period_s` while entered."""

    def __init__(self, pid: int, period_s: float = 0.02) -> None:
        super().__init__(period_s, f"cpu-{pid}")
        self.pid = pid
        self.times: list[float] = []
        self.cpu: list[float] = []
        self._lock = threading.Lock()

    def sample(self) -> None:
        now, cpu = time.monotonic(), tree_cpu_s(self.pid)
        with self._lock:
            self.times.append(now)
            self.cpu.append(cpu)

    def at(self, t: float) -> float:
        """The tree's CPU seconds at instant `t` (clamped to the sampled span)."""
        with self._lock:
            times, cpu = list(self.times), list(self.cpu)
        i = bisect.bisect_left(times, t)
        if i <= 0:
            return cpu[0]
        if i >= len(times):
            return cpu[-1]
        t0, t1 = times[i - 1], times[i]
        share = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return cpu[i - 1] + share * (cpu[i] - cpu[i - 1])

    def between(self, start: float, end: float) -> float:
        """CPU seconds the tree spent in ``[start, end]``; waits for a sample past `end`."""
        deadline = time.monotonic() + 5 * self.period_s + 1.0
        while time.monotonic() < deadline:
            with self._lock:
                if self.times and self.times[-1] >= end:
                    break
            time.sleep(self.period_s)
        return self.at(end) - self.at(start)
