"""The harness of a real-CLI bench: one session of an agent CLI against `penelope serve`.

    Install.find          the pinned npm CLI in its git-ignored folder, or why not
    run_session           penelope serve (no store: a run starts cold) -> recording proxy
                          -> the CLI, once per prompt, in one scratch directory
    run_cli               one CLI process: exit code, stdout, stderr, seconds

What differs by CLI (its environment, its config, its arguments, what counts as a
printed reply) stays in that bench and reaches the harness as `start`: given the
proxy's URL and the scratch directory, it returns the function that runs one turn.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_cli.proxy import Seen
from bench.child import ROOT, penelope_process

DUMMY_KEY = "sk-penelope-bench-dummy"
MISSING_EXIT = 2
TIMED_OUT = 124

Turn = Callable[[int, str], dict[str, Any]]  # (turn index, prompt) -> the run's fields


@dataclass(frozen=True)
class Install:
    """An agent CLI pinned on npm, installed into a git-ignored folder of the repository."""

    label: str  # "Claude Code"
    binary: str  # "claude"
    package: str  # "@anthropic-ai/claude-code"
    version: str
    folder: str  # ".claude-code"
    make_target: str  # "claude-code"

    def find(self, explicit: str | None = None) -> tuple[str | None, str]:
        """The executable, or None and why not."""
        if explicit:
            return (explicit, "") if Path(explicit).is_file() else (None, f"{explicit} not found")
        if shutil.which("node") is None:
            return None, f"node is not on PATH ({self.label} installs and runs through it)"
        found = ROOT / self.folder / "node_modules" / ".bin" / self.binary
        if not found.exists():
            return None, (
                f"{self.label} is not installed in {ROOT / self.folder}: run `make "
                f"{self.make_target}` (npm install --prefix {self.folder} "
                f"{self.package}@{self.version}) in the repository"
            )
        return str(found), ""


@dataclass
class Session:
    """What one session left: the requests the proxy saw, and each run with its requests."""

    log: list[Seen]
    runs: list[dict[str, Any]]
    seconds: float
    server_log: str


def serve_options(model: str, device_pages: int, default_temperature: float) -> list[str]:
    """`penelope serve`'s options: `device_pages` for two sessions' prompts, and no store,
    so a run starts cold whatever earlier runs left in ~/.cache. `default_temperature` is
    for requests that name none (neither CLI names one): 0 makes a run repeatable."""
    cmd = ["--model", model, "--device-pages", str(device_pages), "--store-uri", "none"]
    return [*cmd, "--default-temperature", str(default_temperature), "--log-level", "warning"]


def run_session(
    options: list[str],
    prompts: Sequence[str],
    start: Callable[[str, Path], Turn],
    timeout_s: float,
    paths: frozenset[str],
) -> Session:
    """Serve, record the requests to `paths`, and run one turn per prompt, in order."""
    from bench.agent_cli.proxy import recording_proxy
    from deployments.api.standalone import background_server

    started = time.monotonic()
    log: list[Seen] = []
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="penelope-agent-cli-") as name:
        tmp = Path(name)
        serve_log = tmp / "serve.log"
        serving = penelope_process(options, serve_log, min(timeout_s, 180.0), grace_s=30.0)
        try:
            with (
                serving as (base, _),
                background_server(recording_proxy(base, log, paths=paths)) as url,
            ):
                turn = start(url, tmp)
                for i, prompt in enumerate(prompts):
                    first = len(log)
                    runs.append({**turn(i, prompt), "requests": list(range(first, len(log)))})
        finally:
            server_log = serve_log.read_text(errors="replace")[-2000:]
    return Session(log, runs, time.monotonic() - started, server_log)


def run_cli(
    args: list[str], work: Path, env: dict[str, str], timeout_s: float
) -> tuple[int, str, str, float]:
    """One CLI process in `work`: its exit code (124 on time-out), stdout, stderr, seconds."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(args, cwd=work, env=env, capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)  # fmt: skip
        code, out = done.returncode, done.stdout.decode(errors="replace")
        err = done.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        code, out, err = TIMED_OUT, "", "timed out"
    return code, out, err, round(time.monotonic() - t0, 1)


def scratch(tmp: Path, what: str) -> tuple[Path, Path]:
    """A fresh home and a work directory holding one README."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir()
    work.mkdir()
    (work / "README.md").write_text(f"A scratch project for the {what} bench.\n")
    return home, work
