"""A Ray cluster on this machine: `ray start --head`, then `ray start --address` per worker.

    head    127.0.0.1:GCS   CPUs + {"penelope_head": 1, ENGINE_SLOT: head_slots}
    worker  joins GCS       CPUs + {"penelope_worker": 1, ENGINE_SLOT: worker_slots}

Every engine replica asks for one ENGINE_SLOT, so a node holds at most its
slots of replicas and the rest are placed on the other node: placement across
nodes is forced, not left to Ray's spreading. Token auth is on (Ray 2.60's
default): the token is written to the cluster's own directory and every
process is pointed at it (`RAY_AUTH_MODE=token`, `RAY_AUTH_TOKEN_PATH`), so a
user's `~/.ray/auth_token` is neither read nor overwritten.

Teardown does not run `ray stop`: on one machine it stops *every* Ray of the
user, other clusters included. It ends the processes of this cluster only,
found by the cluster's own temp dir in their command lines (every Ray process
carries its session dir), SIGTERM first, then SIGKILL; then removes the dir.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.net import free_port
from deployments.ray.launch import RAY_PROCESS_ENV

ENGINE_SLOT = "penelope_engine_slot"
HEAD, WORKER = "head", "worker"
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
ROOT = Path(__file__).resolve().parents[2]


class ClusterError(RuntimeError):
    """The cluster could not start, or a node did not behave as asked."""


@dataclass(frozen=True)
class NodeSpec:
    role: str  # HEAD or WORKER
    num_cpus: int
    engine_slots: int


@dataclass(frozen=True)
class Cluster:
    dir: Path  # the cluster's temp dir: Ray's sessions, the token, the store, configs
    gcs_address: str  # 127.0.0.1:port
    dashboard_url: str  # where `serve deploy` sends the config
    env: dict[str, str]  # what a process needs to talk to this cluster (token auth)

    @property
    def logs_dir(self) -> Path:
        return self.dir / "ray" / "session_latest" / "logs"


def _ports() -> list[str]:
    return [
        "--node-manager-port", str(free_port()),
        "--object-manager-port", str(free_port()),
        "--metrics-export-port", str(free_port()),
        "--dashboard-agent-listen-port", str(free_port()),
        "--dashboard-agent-grpc-port", str(free_port()),
        "--runtime-env-agent-port", str(free_port()),
    ]  # fmt: skip


def node_command(spec: NodeSpec, gcs_address: str, temp_dir: Path, dash_port: int) -> list[str]:
    """The `ray start` command line of one node (head: starts the GCS at `gcs_address`)."""
    resources = f'{{"penelope_{spec.role}": 1, "{ENGINE_SLOT}": {spec.engine_slots}}}'
    cmd = [sys.executable, "-m", "bench.cluster.loopback", "start",
           "--node-ip-address", "127.0.0.1", "--num-cpus", str(spec.num_cpus),
           "--num-gpus", "0", "--resources", resources,
           "--disable-usage-stats", *_ports()]  # fmt: skip
    if spec.role == HEAD:
        port = gcs_address.rpartition(":")[2]
        return [*cmd, "--head", "--port", port, "--temp-dir", str(temp_dir),
                "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                "--dashboard-port", str(dash_port),
                "--ray-client-server-port", str(free_port())]  # fmt: skip
    return [*cmd, "--address", gcs_address]


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{what}: `ray start` did not return in {START_TIMEOUT_S:g} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ClusterError(f"{what}: `ray start` exited {done.returncode}:\n{tail}")


def start_node(cluster: Cluster, spec: NodeSpec) -> None:
    """Start one node of `cluster` (the head first); returns once `ray start` did."""
    dash_port = int(cluster.dashboard_url.rpartition(":")[2])
    cmd = node_command(spec, cluster.gcs_address, cluster.dir / "ray", dash_port)
    _run(cmd, {**os.environ, **cluster.env}, f"the {spec.role} node")


def cluster_env(token_path: Path) -> dict[str, str]:
    return {
        **RAY_PROCESS_ENV,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "OMP_NUM_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        # a dead node is noticed in a few seconds, not 30
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    }


def pids_of(cluster_dir: Path, marker: str = "") -> list[int]:
    """Processes whose command line names `cluster_dir` (and `marker`, when given)."""
    needle, found = str(cluster_dir), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and marker in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def raylet_pid(cluster_dir: Path, spec_role: str) -> int:
    """The raylet of the node that carries `penelope_<role>` among its resources."""
    pids = [p for p in pids_of(cluster_dir, "raylet") if _is_raylet_of(p, spec_role)]
    if len(pids) != 1:
        raise ClusterError(f"expected one raylet of the {spec_role} node, found {pids}")
    return pids[0]


def _is_raylet_of(pid: int, role: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(argv)
        and argv[0].endswith(b"/raylet")
        and f"penelope_{role}".encode() in b" ".join(argv)
    )


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_cluster(cluster_dir: Path, grace_s: float = STOP_GRACE_S) -> list[int]:
    """End every process of the cluster (TERM, then KILL after `grace_s`); those left."""
    _signal_all(pids_of(cluster_dir), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids_of(cluster_dir) and time.monotonic() < deadline:
        time.sleep(0.25)
    _signal_all(pids_of(cluster_dir), signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while (left := pids_of(cluster_dir)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return left


def kill_node(cluster: Cluster, role: str) -> int:
    """SIGKILL the raylet of the `role` node (its workers and agents die with it)."""
    pid = raylet_pid(cluster.dir, role)
    os.kill(pid, signal.SIGKILL)
    return pid


@contextmanager
def local_cluster(*nodes: NodeSpec) -> Iterator[Cluster]:
    """Every node up, the head first; on the way out (an error or Ctrl-C too) every
    process ended, dir removed."""
    if not nodes or nodes[0].role != HEAD or any(n.role == HEAD for n in nodes[1:]):
        raise ValueError(f"a cluster is one head node first, then workers: {nodes}")
    # short: Ray's socket paths live under it and must stay under 108 bytes
    cluster_dir = Path(tempfile.mkdtemp(prefix="pcl-", dir="/tmp"))
    token_path = cluster_dir / "auth_token"
    token_path.write_text(secrets.token_hex(32))
    token_path.chmod(0o600)
    cluster = Cluster(
        cluster_dir,
        f"127.0.0.1:{free_port()}",
        f"http://127.0.0.1:{free_port()}",
        cluster_env(token_path),
    )
    try:
        for node in nodes:
            start_node(cluster, node)
        yield cluster
    finally:
        left = stop_cluster(cluster_dir)
        shutil.rmtree(cluster_dir, ignore_errors=True)
        if left:
            print(f"cluster: processes {left} did not exit", file=sys.stderr)
