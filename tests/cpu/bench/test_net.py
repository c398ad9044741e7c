"""`bench.net`: a free port binds, and `wait_http` against a real local server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.net import ServerExited, free_port, wait_http


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status = 200 if self.path == "/health" else 503
        body = b"ok" if status == 200 else b"not yet"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return None


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_free_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert s.getsockname()[1] == port


def test_wait_http_returns_once_the_url_answers_200(server: str) -> None:
    t0 = time.monotonic()
    wait_http(f"{server}/health", 5.0)
    assert time.monotonic() - t0 < 2.0


def test_wait_http_times_out_on_a_status_other_than_200(server: str) -> None:
    with pytest.raises(TimeoutError, match=r"/warming did not answer 200 .*last: status 503"):
        wait_http(f"{server}/warming", 0.6, poll_s=0.1)


def test_wait_http_times_out_on_a_closed_port_within_its_deadline() -> None:
    url = f"http://127.0.0.1:{free_port()}/health"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        wait_http(url, 1.0, poll_s=0.1)
    elapsed = time.monotonic() - t0
    assert 1.0 <= elapsed < 3.0
    message = str(info.value)
    assert url in message and "within 1 s" in message and "ConnectError" in message


def test_wait_http_fails_at_once_when_the_process_behind_it_died() -> None:
    url = f"http://127.0.0.1:{free_port()}/health"
    t0 = time.monotonic()
    with pytest.raises(ServerExited, match="exited before it answered"):
        wait_http(url, 30.0, alive=lambda: False)
    assert time.monotonic() - t0 < 1.0


def test_wait_http_keeps_polling_while_the_process_lives(server: str) -> None:
    checks: list[bool] = []

    def alive() -> bool:
        checks.append(True)
        return True

    wait_http(f"{server}/health", 5.0, alive=alive)
    assert checks  # asked before the first try
