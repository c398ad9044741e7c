"""Our side of the bench: `penelope serve` in its own process group, stopped on exit.

It runs with one torch/OpenMP thread (as the peer recipe does), logs to a
temporary file, and must answer `/health` within the deadline, else the end
of its log is raised. On the way out its group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.child import stop_group
from bench.net import ServerExited, free_port, wait_http
from bench.speed.config import SpeedConfig

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Server:
    url: str
    pid: int


def serve_argv(cfg: SpeedConfig, port: int) -> list[str]:
    return [
        sys.executable, "-m", "penelope_cli.cli", "serve",
        "--port", str(port),
        "--model", cfg.model,
        "--dtype", cfg.dtype,
        "--page-size", str(cfg.page_size),
        "--device-pages", str(cfg.device_pages),
        "--host-pages", "0",
        "--store-uri", "none",  # the raw engine: no state from earlier runs
        "--log-level", "warning",
    ]  # fmt: skip


@contextmanager
def penelope_server(cfg: SpeedConfig) -> Iterator[Server]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    fd, log_name = tempfile.mkstemp(prefix="penelope-speed-", suffix=".log")
    log = Path(log_name)
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            serve_argv(cfg, port), stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_health(url, proc, log, cfg.startup_timeout_s)
        yield Server(url, proc.pid)
    finally:
        stop_group(proc, STOP_GRACE_S)
        log.unlink(missing_ok=True)


def _wait_health(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    try:
        wait_http(f"{url}/health", timeout_s, alive=lambda: proc.poll() is None)
    except (TimeoutError, ServerExited) as exc:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        why = "exited" if proc.poll() is not None else f"was not up within {timeout_s:g} s"
        raise RuntimeError(f"penelope serve {why}; end of its log:\n{tail}") from exc
