"""Our side of the bench: `penelope serve` in its own process group, stopped on exit.

It runs with one torch/OpenMP thread (as the peer recipe does), logs to a
temporary file, and must answer `/health` within the deadline, else the end
of its log is raised (`bench.child.penelope_process`). On the way out its group
gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.child import penelope_process, server_process
from bench.net import free_port
from bench.speed.config import SpeedConfig
from bench.speed.peers import SPEED_PEERS, Peer


@dataclass(frozen=True)
class Server:
    url: str
    pid: int


def serve_options(cfg: SpeedConfig) -> list[str]:
    return [
        "--model", cfg.model,
        "--dtype", cfg.dtype,
        "--weights", cfg.weights,
        "--page-size", str(cfg.page_size),
        "--device-pages", str(cfg.device_pages),
        "--host-pages", "0",
        "--store-uri", "none",  # the raw engine: no state from earlier runs
        "--log-level", "warning",
    ]  # fmt: skip


@contextmanager
def penelope_server(cfg: SpeedConfig) -> Iterator[Server]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    fd, log_name = tempfile.mkstemp(prefix="penelope-speed-", suffix=".log")
    os.close(fd)
    log = Path(log_name)
    try:
        serving = penelope_process(serve_options(cfg), log, cfg.startup_timeout_s, env=env)
        with serving as (url, proc):
            yield Server(url, proc.pid)
    finally:
        log.unlink(missing_ok=True)


@dataclass(frozen=True)
class StartedPeer:
    name: str
    url: str
    pid: int
    peer: Peer
    command: str

    def about(self) -> dict[str, Any]:
        """What the report says of it: weights, version and the command that started it."""
        version = self.peer.version()
        if not version:  # vLLM answers /version
            try:
                version = f"vLLM {httpx.get(f'{self.url}/version', timeout=5).json()['version']}"
            except (httpx.HTTPError, ValueError, KeyError):
                version = "unknown"
        return {"weights": self.peer.weights, "version": version, "command": self.command}


@contextmanager
def started_peers(cfg: SpeedConfig) -> Iterator[list[StartedPeer]]:
    """Every `cfg.peers` entry started from its script, one after another, each answering
    `/health` within the start-up deadline; all stopped on the way out."""
    with ExitStack() as stack:
        started = []
        for name in cfg.peers:
            peer = SPEED_PEERS.get(name)
            port = free_port()
            command = peer.shell(port, cfg.batch)
            fd, log_name = tempfile.mkstemp(prefix=f"penelope-speed-{name}-", suffix=".log")
            os.close(fd)
            log, url = Path(log_name), f"http://127.0.0.1:{port}"
            stack.callback(log.unlink, missing_ok=True)
            proc = stack.enter_context(
                server_process(
                    name,
                    command,
                    log,
                    f"{url}/health",
                    cfg.startup_timeout_s,
                    shell=True,
                    grace_s=15.0,
                )  # fmt: skip
            )
            started.append(StartedPeer(name, url, proc.pid, peer, command))
        yield started
