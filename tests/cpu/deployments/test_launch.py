"""`make run`'s launcher: its own local Ray, or a clear failure within seconds."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deployments.ray import launch

ROOT = Path(__file__).resolve().parents[3]


def dead_address() -> str:
    with socket.socket() as s:  # a port that was free a moment ago answers nobody
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def listener() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_a_stale_current_cluster_file_is_reported_and_a_local_ray_started(tmp_path: Path) -> None:
    stale = tmp_path / "ray_current_cluster"
    stale.write_text(dead_address() + "\n")
    t0 = time.monotonic()
    found = launch.plan({}, stale)
    assert time.monotonic() - t0 < launch.PROBE_TIMEOUT_S + 1
    assert found.address == "local"
    note = found.notes[-1]
    assert "does not answer" in note and str(stale) in note and "ray stop --force" in note


def test_a_live_cluster_in_the_file_is_left_alone(tmp_path: Path, listener: str) -> None:
    recorded = tmp_path / "ray_current_cluster"
    recorded.write_text(listener)
    found = launch.plan({}, recorded)
    assert found.address == "local" and "serve deploy" in found.notes[-1]


def test_no_file_means_a_local_ray(tmp_path: Path) -> None:
    assert launch.plan({}, tmp_path / "absent").address == "local"


def test_a_dead_ray_address_fails_within_seconds_naming_it(tmp_path: Path) -> None:
    address = dead_address()
    t0 = time.monotonic()
    with pytest.raises(launch.LaunchError, match=f"RAY_ADDRESS={address}.*Unset RAY_ADDRESS"):
        launch.plan({"RAY_ADDRESS": address}, tmp_path / "absent")
    assert time.monotonic() - t0 < launch.PROBE_TIMEOUT_S + 1


def test_a_live_ray_address_is_served_on(tmp_path: Path, listener: str) -> None:
    assert launch.plan({"RAY_ADDRESS": listener}, tmp_path / "absent").address == listener


def test_the_command_runs_serve_on_its_own_local_ray(tmp_path: Path) -> None:
    config = tmp_path / "serve_config.yaml"  # the real config on a port nobody holds
    port = dead_address().rsplit(":", 1)[1]
    config.write_text(
        (ROOT / "serve_config.yaml").read_text().replace("port: 8000", f"port: {port}")
    )
    command, found = launch.prepare(config, {"RAY_ADDRESS": "local"})
    assert Path(command[0]).name == "serve"
    assert command[1:] == ["run", "--address", "local", str(config)]
    assert found.address == "local"


def test_a_taken_port_fails_naming_it(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        config = tmp_path / "serve.yaml"
        config.write_text(f"http_options:\n  host: 127.0.0.1\n  port: {port}\n")
        with pytest.raises(launch.LaunchError, match=f"127.0.0.1:{port} is already in use"):
            launch.prepare(config, {})


def test_main_exits_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = dead_address()
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert launch.main([str(ROOT / "serve_config.yaml")]) == 2
    assert f"make run: RAY_ADDRESS={address}" in capsys.readouterr().err
    assert launch.main([str(tmp_path / "missing.yaml")]) == 2
    assert "no serve config" in capsys.readouterr().err
