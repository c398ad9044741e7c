"""`make run`: serve a config on a local Ray of its own, or fail within seconds saying why.

    python -m deployments.ray.launch [serve_config.yaml]

`serve run` alone connects to whatever Ray it finds: `RAY_ADDRESS`, or the
address a past `ray start` left in `/tmp/ray/ray_current_cluster`. After a
cluster was killed without `ray stop`, that file names a dead GCS, and `serve
run` retries it for minutes with no clear message. This launcher looks first:

* `RAY_ADDRESS` set: the user chose a cluster. If its GCS answers, serve there;
  if not, exit at once naming the address and how to clear it.
* otherwise a local Ray of our own (`--address local`), whatever the current-
  cluster file says; a stale file is reported with the command that clears it.
* the HTTP port of the config already taken: exit at once, naming it.

Then it replaces itself with `serve run --address ADDRESS CONFIG`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

CURRENT_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
# Ray processes we start get these. Serve's controller kills an HTTP proxy that is not
# ready within RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S (5 s by default); on a busy 2-core
# machine a proxy's start-up takes longer, and the proxy is killed before it ran
# ("ActorDiedError ... cancelled before it started running"), which left Serve half
# started. 60 s lets a slow start finish; a proxy that never starts still fails.
RAY_PROCESS_ENV = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60"}
PROBE_TIMEOUT_S = 2.0
CLEAR_HINT = "`ray stop --force` (or remove {file})"


class LaunchError(RuntimeError):
    """What stops `make run` before Ray starts; the message says how to clear it."""


@dataclass(frozen=True)
class Plan:
    address: str  # what `serve run --address` gets: "local" or a live cluster's address
    notes: tuple[str, ...]


def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections at `host:port` (a GCS address)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return False
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def plan(env: Mapping[str, str], current_cluster_file: Path = CURRENT_CLUSTER_FILE) -> Plan:
    explicit = env.get("RAY_ADDRESS", "").strip()
    if explicit and explicit not in ("local", "auto"):
        if not answers(explicit):
            raise LaunchError(
                f"RAY_ADDRESS={explicit} names a Ray cluster that does not answer within "
                f"{PROBE_TIMEOUT_S:g} s. Unset RAY_ADDRESS to let `make run` start a local Ray of "
                "its own, or start that cluster first."
            )
        return Plan(explicit, (f"serving on the Ray cluster at RAY_ADDRESS={explicit}",))
    notes = ["starting a local Ray of its own (serve run --address local)"]
    try:
        recorded = current_cluster_file.read_text().strip()
    except OSError:
        recorded = ""
    if recorded:
        hint = CLEAR_HINT.format(file=current_cluster_file)
        if answers(recorded):
            notes.append(
                f"a Ray cluster also runs at {recorded} ({current_cluster_file}); it is left "
                "alone: `serve deploy serve_config.yaml` serves there instead"
            )
        else:
            notes.append(
                f"ignoring {current_cluster_file}: it names {recorded}, which does not answer "
                f"(a cluster stopped without `ray stop`); clear it with {hint}"
            )
    return Plan("local", tuple(notes))


def http_endpoint(config: Mapping[str, object]) -> tuple[str, int]:
    options = config.get("http_options") or {}
    if not isinstance(options, Mapping):
        raise LaunchError("http_options in the serve config must be a mapping")
    return str(options.get("host", "127.0.0.1")), int(str(options.get("port", 8000)))


def port_taken(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def serve_command(config_path: Path, address: str) -> list[str]:
    serve = Path(sys.executable).with_name("serve")
    exe = str(serve) if serve.exists() else shutil.which("serve")
    if exe is None:
        raise LaunchError("the `serve` command (ray[serve]) is not installed: run `make setup`")
    return [exe, "run", "--address", address, str(config_path)]


def prepare(config_path: Path, env: Mapping[str, str]) -> tuple[list[str], Plan]:
    """Every check that can fail fast; the command to run and what was found."""
    if not config_path.is_file():
        raise LaunchError(f"no serve config at {config_path}")
    config = yaml.safe_load(config_path.read_text()) or {}
    host, port = http_endpoint(config)
    found = plan(env)
    if found.address == "local" and port_taken(host, port):
        raise LaunchError(
            f"{host}:{port} is already in use: another `make run` or Serve application is "
            "running (stop it with Ctrl-C, `serve shutdown -y` or `ray stop`), or change "
            "http_options.port"
        )
    return serve_command(config_path, found.address), found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m deployments.ray.launch",
        description="Serve a Ray Serve config on a local Ray of its own (what `make run` does).",
    )
    ap.add_argument(
        "config",
        nargs="?",
        default="serve_config.yaml",
        help="serve config YAML (default: %(default)s)",
    )
    args = ap.parse_args(argv)
    try:
        command, found = prepare(Path(args.config), os.environ)
    except LaunchError as e:
        print(f"make run: {e}", file=sys.stderr)
        return 2
    for note in found.notes:
        print(f"make run: {note}", file=sys.stderr)
    sys.stderr.flush()
    for key, value in RAY_PROCESS_ENV.items():  # inherited by `serve run` and its local Ray
        os.environ.setdefault(key, value)
    os.execv(command[0], command)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
