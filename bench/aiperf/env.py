"""aiperf's own venv (`scripts/aiperf_env.sh`, `make aiperf`): found, and called with a deadline.

aiperf never runs in the product's venv (it brings transformers, pandas and
pins of its own). The bench and the tests reach it as a subprocess: its
`aiperf` command, or its python with a snippet that imports aiperf's own
loader. Every call has a deadline; a missing venv is an error that names the
command that builds it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
VENV_ENV = "AIPERF_VENV"


class AiperfMissing(RuntimeError):
    """aiperf's venv is not built (or not at the pinned version)."""


def pinned_version() -> str:
    """The aiperf version requirements.txt pins (`aiperf==X`)."""
    found = re.search(r"^aiperf==(\S+)", REQUIREMENTS.read_text(), re.M)
    if found is None:
        raise ValueError(f"{REQUIREMENTS} pins no aiperf==VERSION")
    return found.group(1)


def venv_dir() -> Path:
    """`$AIPERF_VENV`, else .venv-aiperf at the repository root (as the script builds it)."""
    return Path(os.environ.get(VENV_ENV) or ROOT / ".venv-aiperf")


def python() -> Path:
    """aiperf's venv's python; `AiperfMissing` says how to build it."""
    py = venv_dir() / "bin" / "python"
    if not (venv_dir() / ".penelope-ready").is_file() or not py.is_file():
        raise AiperfMissing(
            f"aiperf's venv {venv_dir()} is not built: run `make aiperf` "
            f"(scripts/aiperf_env.sh install; ${VENV_ENV} names another place)"
        )
    return py


def aiperf_command() -> Path:
    return python().with_name("aiperf")


def run_python(
    code: str, args: Sequence[str], timeout_s: float, extra_env: Mapping[str, str] = {}
) -> str:
    """Run `code` (with `args` as sys.argv[1:]) in aiperf's venv; its stdout, or an error
    that carries its stderr's tail. `extra_env`: e.g. `tokenizer.hub_env`."""
    return _run([str(python()), "-c", code, *args], timeout_s, extra_env)


def run_aiperf(
    args: Sequence[str],
    timeout_s: float,
    extra_env: Mapping[str, str] = {},
    cwd: Path | None = None,
) -> str:
    """`aiperf ARGS` from its venv, within `timeout_s`; its stdout."""
    return _run([str(aiperf_command()), *args], timeout_s, extra_env, cwd)


def _run(
    cmd: list[str], timeout_s: float, extra_env: Mapping[str, str], cwd: Path | None = None
) -> str:
    env = {**os.environ, "PYTHONPATH": "", **extra_env}
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=cwd, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{cmd[0]} {' '.join(cmd[1:3])} ran past {timeout_s:g} s") from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:3])} exited {done.returncode}:\n{tail}")
    return done.stdout
