"""A spawned child process that returns one result, or fails clearly, within a deadline.

`server_process(name, cmd, log, health_url, timeout_s)` starts a server in its own
process group, logging to a file, and holds it while its health URL answers 200
within the deadline; on the way out the whole group is stopped (`stop_group`).
A server that exits first or does not answer in time raises `StartFailed` with
the root cause its log names and the log's end. `penelope_process(options, ...)` is
that for this checkout's `penelope serve`, the one every bench starts.

`run_child(target, args, timeout_s=...)` runs `target(*args)` in a fresh
(spawned) interpreter and returns what it returned. Nothing waits forever: if
the child dies before answering, or has not answered by the deadline, the
parent kills it and raises `ChildFailed` with its exit code and the last lines
of its stderr (the child's file descriptor 2 goes to a temporary file, so a
crash in native code is captured too). On success the child's stderr is copied
to this process's stderr.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.net import ServerExited, free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.1
KILL_GRACE_S = 5.0
TAIL_LINES = 20
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception): \S")


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Stop a server started in its own process group: SIGTERM, then SIGKILL after
    `grace_s`; returns once every process of the group has exited (or `grace_s` after
    the SIGKILL). The leader alone is not enough: a server's workers (vLLM's engine
    core) can outlive it for a while and keep its listening socket, so the next server
    on that port would find it taken."""
    pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            continue
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if not _group_alive(pgid):
            break
    if proc.poll() is None:
        proc.wait(grace_s)


def _group_alive(pgid: int) -> bool:
    """Whether a live process of group `pgid` is left. Zombies do not count: they hold
    no socket, and where PID 1 reaps late (as in some containers) they linger."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: any member, zombies included
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


class StartFailed(RuntimeError):
    """A started server exited, or did not answer its health URL in time."""


def _why(name: str, log: Path) -> str:
    """The root cause a log names (its first `...Error: ...` line), then its end."""
    lines = log.read_text(errors="replace").splitlines()
    cause = next((ln for ln in lines if _ERROR_LINE.search(ln)), None)
    tail = "\n".join(lines[-TAIL_LINES:])
    head = f"; {cause.strip()}" if cause else ""
    return f"server {name} did not come up{head}\nend of its log:\n{tail}"


@contextmanager
def server_process(
    name: str,
    cmd: Sequence[str] | str,
    log: Path,
    health_url: str,
    timeout_s: float,
    *,
    env: dict[str, str] | None = None,
    grace_s: float = 10.0,
    shell: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd` in its own process group (a shell command with `shell`), stdout and stderr to
    `log` (truncated), held once `health_url` answers 200 within `timeout_s`; its group
    is stopped on the way out. `StartFailed` if it exits first or does not answer."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, shell=shell, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    try:
        try:
            wait_http(health_url, timeout_s, alive=lambda: proc.poll() is None)
        except (TimeoutError, ServerExited) as exc:
            raise StartFailed(_why(name, log)) from exc
        yield proc
    finally:
        stop_group(proc, grace_s)


@contextmanager
def penelope_process(
    options: Sequence[str],
    log: Path,
    timeout_s: float,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    grace_s: float = 10.0,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`penelope serve OPTIONS` of this checkout on 127.0.0.1 (`port`, else a free one),
    held while healthy (`server_process`): its base URL and its process. It runs with
    `env` (default: this process's) and this checkout first on PYTHONPATH."""
    port = port or free_port()
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    argv = [sys.executable, "-m", "penelope_cli.cli", "serve", "--port", str(port), *options]
    url = f"http://127.0.0.1:{port}"
    with server_process("penelope serve", argv, log, f"{url}/health", timeout_s, env=env,
                        grace_s=grace_s) as proc:  # fmt: skip
        yield url, proc


class ChildFailed(RuntimeError):
    """The child exited, crashed or overran its deadline without returning a result."""

    def __init__(self, message: str, exitcode: int | None, stderr_tail: str) -> None:
        super().__init__(message)
        self.exitcode = exitcode
        self.stderr_tail = stderr_tail


def _trampoline(target: Callable[..., Any], args: tuple[Any, ...], conn: Any, err: str) -> None:
    fd = os.open(err, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as we do)
    try:
        result = target(*args)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        raise
    conn.send(result)
    conn.close()


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _stop(proc: Any) -> None:
    if proc.is_alive():
        proc.terminate()
        proc.join(KILL_GRACE_S)
    if proc.is_alive():
        proc.kill()
        proc.join(KILL_GRACE_S)


def run_child(
    target: Callable[..., Any], args: tuple[Any, ...], *, timeout_s: float, name: str
) -> Any:
    """`target(*args)` in a spawned process; its result, or `ChildFailed` within the deadline."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    ctx = mp.get_context("spawn")
    fd, err_name = tempfile.mkstemp(prefix=f"penelope-{name}-", suffix=".stderr")
    os.close(fd)
    err = Path(err_name)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_trampoline, args=(target, args, child, err_name), name=name)
    try:
        proc.start()
        child.close()  # only the child holds the sending end: its death reads as EOF here
        deadline = time.monotonic() + timeout_s
        while True:
            if parent.poll(POLL_S):
                try:
                    result = parent.recv()
                except EOFError:
                    proc.join(KILL_GRACE_S)
                    raise _failed(name, "exited before sending its result", proc, err) from None
                proc.join(KILL_GRACE_S)
                sys.stderr.write(err.read_text(errors="replace"))
                return result
            if not proc.is_alive() and not parent.poll(0):
                raise _failed(name, "exited before sending its result", proc, err)
            if time.monotonic() > deadline:
                _stop(proc)
                raise _failed(name, f"sent no result within {timeout_s:g} s; killed", proc, err)
    finally:
        _stop(proc)
        parent.close()
        err.unlink(missing_ok=True)


def _failed(name: str, what: str, proc: Any, err: Path) -> ChildFailed:
    tail = _tail(err)
    shown = ("; last lines of its stderr:\n" + tail) if tail else "; its stderr was empty"
    message = f"{name} (pid {proc.pid}) {what}: exit code {proc.exitcode}{shown}"
    return ChildFailed(message, proc.exitcode, tail)
