"""`bench.sampler.Sampler`: a sample at entry, then one per period until the block ends."""

from __future__ import annotations

import time

import pytest

from bench.sampler import Sampler


class Counting(Sampler):
    def __init__(self) -> None:
        super().__init__(0.01, "counting")
        self.count = 0

    def sample(self) -> None:
        self.count += 1


def test_a_sample_at_entry_then_one_per_period_until_exit() -> None:
    with Counting() as s:
        assert s.count == 1  # taken before the block runs
        time.sleep(0.2)
    after = s.count
    assert after >= 5
    time.sleep(0.05)
    assert s.count == after  # the thread has stopped


def test_the_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="period_s"):
        Sampler(0.0, "x")
