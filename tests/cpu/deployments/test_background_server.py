"""`background_server`: up within its deadline or a clear error, never a silent hang."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from fastapi import FastAPI

from deployments.api.standalone import background_server


def hello_app() -> FastAPI:
    app = FastAPI()
    app.get("/hello")(lambda: {"ok": True})
    return app


def test_it_serves_and_stops() -> None:
    with background_server(hello_app()) as url:
        assert httpx.get(f"{url}/hello", timeout=10).json() == {"ok": True}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/hello", timeout=2)


def test_a_taken_port_fails_at_once_with_the_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} did not start"):
            with background_server(hello_app(), port=port, timeout_s=60):
                pass
        assert time.monotonic() - t0 < 10
