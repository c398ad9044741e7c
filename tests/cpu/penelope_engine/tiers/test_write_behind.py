"""The write-behind thread: in order, within its byte bound, never stopped by a failed job."""

from __future__ import annotations

import threading

import pytest

from penelope_engine.tiers.write_behind import WriteBehind


def test_jobs_run_in_order_and_flush_waits_for_them() -> None:
    writer = WriteBehind(max_bytes=100)
    done: list[int] = []
    for i in range(5):
        assert writer.submit(10, lambda i=i: done.append(i))
    assert writer.flush(10.0)
    assert done == [0, 1, 2, 3, 4] and writer.pending_bytes == 0
    assert writer.close(10.0)


def test_a_job_past_the_bound_is_refused_until_room_frees() -> None:
    writer = WriteBehind(max_bytes=100)
    gate = threading.Event()
    assert writer.submit(60, lambda: gate.wait(10.0))
    assert writer.room() == 40
    assert not writer.submit(50, lambda: None)  # refused, nothing queued
    assert writer.submit(40, lambda: None)
    assert not writer.flush(0.05)  # the first job still blocks: the deadline holds
    gate.set()
    assert writer.flush(10.0) and writer.room() == 100
    assert writer.close(10.0)


def test_a_failing_job_is_counted_and_the_next_ones_still_run() -> None:
    writer = WriteBehind(max_bytes=10)
    ran: list[str] = []

    def boom() -> None:
        raise OSError("the bucket vanished")

    assert writer.submit(1, boom)
    assert writer.submit(1, lambda: ran.append("after"))
    assert writer.flush(10.0)
    assert ran == ["after"] and writer.failed == 1
    writer.close(10.0)
    assert not writer.submit(1, lambda: None)  # closed: refused


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        WriteBehind(0)
