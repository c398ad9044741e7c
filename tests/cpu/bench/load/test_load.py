"""`penelope bench load`, run small: real server, real client process, real trace sessions."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from bench.child import ChildFailed
from bench.load.client import summarize
from bench.load.config import LoadConfig
from bench.load.server import page_report, run_load
from penelope_cli.cli import main
from penelope_engine.shipped import SHIPPED_AGENT, SHIPPED_POLICY


def test_a_short_run_has_no_server_error_no_leak_and_refuses_every_malformed_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "load", "--sessions", "6", "--duration-s", "5", "--warmup-s", "1"]
    argv += ["--ramp-s", "0.5", "--malformed-share", "0.5", "--cancel-share", "0.3"]
    argv += ["--device-pages", "1024", "--time-scale", "0.02", "--json"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    r = json.loads(out.strip().splitlines()[0])
    q, pages = r["requests"], r["pages"]
    assert r["ok"] and "verdict" in err
    assert q["server_errors"] == 0 and q["transport_errors"] == 0
    assert q["by_kind"]["cancel"].get("cancelled", 0) > 0
    malformed = q["by_kind"]["malformed"]
    assert sum(malformed.values()) == q["malformed_refused_4xx"] > 0
    assert q["latency_s"]["count"] > 0 and q["latency_s"]["p99"] >= q["latency_s"]["p50"]
    assert pages["integrity"] == "ok" and pages["engine_idle"]
    assert pages["request_pages"] == pages["locked_nodes"] == 0
    assert pages["hit_ratio"] > 0  # later turns of a session reuse its pages
    assert r["config"]["scale"]["token_stride"] == 4
    ran = r["engine"]  # what ships: the policy, a host tier, a store, the agent levers
    assert ran["policy"] == SHIPPED_POLICY and ran["host_pages"] == 2 * ran["device_pages"]
    assert ran["store"] and ran["agent"]["retention"] == SHIPPED_AGENT.retention
    assert r["memory"]["samples"] > 1


def test_page_report_reads_the_locks_and_pages_running_requests_hold(make_engine) -> None:  # type: ignore[no-untyped-def]
    """`EngineStats.request_pages` and `locked_nodes` (what `page_report` reads) match the
    scheduler's and a walk of the whole tree, while requests run and once they ended."""
    from penelope_engine.protocol import GenerateRequest, SamplingParams

    engine = make_engine(device_pages=64)
    sampling = SamplingParams(max_tokens=4, ignore_eos=True)
    shared = tuple(range(100, 124))
    engine.generate_sync(GenerateRequest("a", shared + (7, 8, 9), sampling, "a"))
    for sid in ("b", "c"):  # the shared prefix is cached: both lock its path
        engine.add_request(GenerateRequest(sid, shared + (11, 12, 13, 14, 15), sampling, sid))
    engine.step()

    def walked() -> int:
        return sum(1 for n in engine.inspect().core.cache._tree.iter_nodes() if n.lock > 0)

    stats = engine.stats()
    assert stats.locked_nodes == walked() > 0
    assert stats.request_pages == engine.inspect().core.scheduler.request_pages() > 0
    assert page_report(engine)["locked_nodes"] == stats.locked_nodes
    while engine.has_work():
        engine.step()
    stats = engine.stats()
    assert stats.locked_nodes == walked() == 0 and stats.request_pages == 0
    report = page_report(engine)
    assert report["integrity"] == "ok" and report["request_pages"] == report["locked_nodes"] == 0


def test_server_errors_count_5xx_and_stream_errors_not_refusals() -> None:
    records = [
        ("plain", "200", 0.1),
        ("plain", "200", 0.3),
        ("malformed", "400", 0.0),
        ("stream", "429", 0.0),
        ("plain", "503", 0.0),
        ("stream", "200+error:internal_error", 0.2),
        ("stream", "200+truncated", 0.2),
        ("cancel", "cancelled", 0.1),
        ("plain", "client_error:ReadTimeout", 9.0),
    ]
    s = summarize(records)
    assert s["server_errors"] == 3 and s["transport_errors"] == 1
    assert s["malformed_refused_4xx"] == 1
    assert s["latency_s"]["count"] == 2 and s["latency_s"]["p50"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sessions": 0}, "positive"),
        ({"length_scale": 2.0}, "length_scale"),
        ({"cancel_share": 1.5}, "cancel_share"),
    ],
)
def test_config_is_validated(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoadConfig(**kwargs)  # type: ignore[arg-type]


def test_length_scales_below_one_token_per_block_keep_every_kth_token() -> None:
    assert LoadConfig(length_scale=1 / 64).stride == 1
    assert LoadConfig(length_scale=1 / 256).stride == 4
    assert LoadConfig(length_scale=1 / 16).stride == 1


def test_a_killed_client_fails_the_run_within_seconds_with_its_exit_code() -> None:
    """The hang this guards against: the parent waited forever on a dead client's pipe."""
    outcome: dict[str, BaseException | dict] = {}
    cfg = LoadConfig(sessions=4, duration_s=300, warmup_s=1, ramp_s=0.5, device_pages=512)

    def run() -> None:
        try:
            outcome["result"] = run_load(cfg)
        except BaseException as e:  # noqa: BLE001 (handed to the test thread)
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    client = None
    while client is None and time.monotonic() < deadline and thread.is_alive():
        client = next((p for p in mp.active_children() if p.name == "load-client"), None)
        time.sleep(0.1)
    assert client is not None, outcome
    time.sleep(1.0)  # let it start sending requests
    os.kill(client.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    thread.join(timeout=60)
    assert not thread.is_alive(), "run_load still waits on a dead client"
    assert time.monotonic() - killed_at < 30
    error = outcome.get("error")
    assert isinstance(error, ChildFailed), outcome
    assert error.exitcode == -signal.SIGKILL
    assert "load-client" in str(error) and "exit code -9" in str(error)
