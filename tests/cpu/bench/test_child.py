"""`run_child`: a spawned process's result, or a clear error within its deadline."""

from __future__ import annotations

import os
import sys
import time

import pytest

from bench.child import ChildFailed, run_child


def answer(x: int) -> int:
    print("child says hello", file=sys.stderr)
    return x * 2


def crash_hard(code: int) -> None:
    print("about to die: the disk is full", file=sys.stderr)
    sys.stderr.flush()
    os._exit(code)


def raise_error() -> None:
    raise FileNotFoundError("no such trace: /nowhere/trace.jsonl.gz")


def hang() -> None:
    print("waiting for a server that never answers", file=sys.stderr)
    sys.stderr.flush()
    time.sleep(3600)


def test_the_result_comes_back_and_the_childs_stderr_is_passed_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert run_child(answer, (21,), timeout_s=60, name="doubler") == 42
    assert "child says hello" in capfd.readouterr().err


def test_a_child_that_exits_without_a_result_is_an_error_with_its_code_and_stderr() -> None:
    t0 = time.monotonic()
    with pytest.raises(ChildFailed, match="exit code 3") as info:
        run_child(crash_hard, (3,), timeout_s=60, name="crasher")
    assert "the disk is full" in str(info.value)
    assert info.value.exitcode == 3
    assert time.monotonic() - t0 < 30


def test_an_exception_in_the_child_shows_its_traceback() -> None:
    with pytest.raises(ChildFailed) as info:
        run_child(raise_error, (), timeout_s=60, name="reader")
    assert info.value.exitcode == 1
    assert "FileNotFoundError: no such trace" in info.value.stderr_tail


def test_a_child_past_its_deadline_is_killed_and_reported() -> None:
    t0 = time.monotonic()
    with pytest.raises(ChildFailed, match="no result within 3 s") as info:
        run_child(hang, (), timeout_s=3, name="hanger")
    assert "never answers" in str(info.value)
    assert info.value.exitcode is not None and info.value.exitcode < 0  # killed by a signal
    assert time.monotonic() - t0 < 30


def test_the_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        run_child(answer, (1,), timeout_s=0, name="doubler")


def test_stop_group_waits_for_every_process_of_the_group() -> None:
    """The leader dies at SIGTERM; its child ignores SIGTERM (as a server's worker that
    keeps the listening socket might linger): stop_group returns only once the child is
    gone too, killed after the grace (a zombie left for a slow PID 1 does not count)."""
    import subprocess
    import time

    from bench.child import _group_alive, stop_group

    proc = subprocess.Popen(
        "(trap '' TERM; sleep 30) & exec sleep 30", shell=True, start_new_session=True
    )
    time.sleep(0.3)
    t0 = time.monotonic()
    stop_group(proc, grace_s=1.0)
    took = time.monotonic() - t0
    assert proc.poll() is not None and not _group_alive(proc.pid)
    assert 1.0 <= took < 10.0  # it waited out the grace for the child, then killed it
