"""A moto S3 server that can be stopped and started again on the same port and data.

moto keeps its buckets in this process's memory, so a server stopped and
started again here serves the objects written before: the store comes back
as a real S3 endpoint would after an outage. The bench's engine reaches it
through `FaultProxy`, which keeps its own port while the server is down.
"""

from __future__ import annotations

import logging

from bench.cluster.s3 import START_TIMEOUT_S, _wait_accepting


class RestartableS3:
    def __init__(self, port: int) -> None:
        self.port = port
        self._server: object | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> RestartableS3:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        _wait_accepting("127.0.0.1", self.port, START_TIMEOUT_S)
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()  # type: ignore[attr-defined]
            self._server = None

    def __enter__(self) -> RestartableS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
