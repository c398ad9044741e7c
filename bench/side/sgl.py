"""sgl-router (`cache_aware`) in front of two `penelope serve` processes.

sgl-router is not a dependency of this package: its interpreter is named by
`--sglang-router-python` (a venv with `pip install sglang-router==0.3.2`).
The workers answer its `/server_info` and `/model_info` probes
(`deployments.api.sglang_probes`) and run the Ray replicas' engine (tiny Qwen3,
one torch thread, the same pages). Every process starts in its own process
group with its output in a temporary log file; a process that does not come
up within the deadline fails the set-up with the end of its log. On the way
out each group gets SIGTERM, then SIGKILL, and its log is removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.child import stop_group
from bench.net import ServerExited, free_port, wait_http
from bench.side.config import SideConfig, serve_command_args
from bench.side.ray_app import ROOT

STOP_GRACE_S = 10.0


@dataclass
class Started:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def wait_http(self, url: str, deadline: float) -> None:
        """`wait_http` on `url` while the process lives; the end of its log if it fails."""
        try:
            wait_http(url, max(1.0, deadline - time.monotonic()), lambda: self.proc.poll() is None)
        except (TimeoutError, ServerExited) as exc:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{self.name}: {exc}; end of its log {self.log}:\n{tail}") from exc


@contextmanager
def process(argv: list[str], name: str) -> Iterator[Started]:
    """`argv` in its own process group, logging to a temporary file; stopped on exit."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    fd, log_name = tempfile.mkstemp(prefix=f"penelope-side-{name}-", suffix=".log")
    with os.fdopen(fd, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        yield Started(name, proc, Path(log_name))
    finally:
        stop_group(proc, STOP_GRACE_S)
        Path(log_name).unlink(missing_ok=True)  # a failure to start already quoted its end


@contextmanager
def sgl_fleet(cfg: SideConfig, router_python: str) -> Iterator[str]:
    """`cfg.replicas` workers and sgl-router over them; yields the router's base URL."""
    deadline = time.monotonic() + cfg.startup_timeout_s
    with ExitStack() as stack:
        workers = []
        for i in range(cfg.replicas):
            port = free_port()
            argv = [sys.executable, "-m", "penelope_cli.cli", "serve", "--port", str(port)]
            argv += [*serve_command_args(cfg), "--log-level", "warning"]
            workers.append(
                (f"http://127.0.0.1:{port}", stack.enter_context(process(argv, f"worker{i}")))
            )
        for url, worker in workers:
            worker.wait_http(f"{url}/health", deadline)
        port = free_port()
        argv = [router_python, "-m", "sglang_router.launch_router", "--worker-urls"]
        argv += [url for url, _ in workers]
        argv += ["--policy", "cache_aware", "--host", "127.0.0.1", "--port", str(port)]
        router = stack.enter_context(process(argv, "sgl-router"))
        url = f"http://127.0.0.1:{port}"
        router.wait_http(f"{url}/v1/models", deadline)
        yield url
