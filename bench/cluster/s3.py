"""A local S3-compatible server (moto's server mode) for the cluster bench and the tests.

Set up the way a user sets up real S3: a bucket, an ``s3://bucket/prefix``
store URI, the endpoint and region as the engine's `store_endpoint` and
`store_region`, and credentials in the standard AWS environment variables
of every node (`credentials_env`). moto accepts any key pair; it is a bench
and test tool here, never a dependency of the package.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from bench.child import server_process
from bench.net import free_port
from cache_store import StoreLocation

REGION = "us-east-1"
START_TIMEOUT_S = 30.0  # moto's server imports for seconds on a busy machine
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "penelope-bench", "AWS_SECRET_ACCESS_KEY": "penelope-secret"}


@contextmanager
def local_s3_server(log: Path | None = None) -> Iterator[str]:
    """moto's server on 127.0.0.1 and a free port, in a process of its own (as S3 is to
    a cluster: its requests never wait on the client's interpreter), up until the block
    ends: its URL. Its output goes to `log` (None: a temporary file)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with contextlib.ExitStack() as stack:
        if log is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moto-"))) / "log"
        stack.enter_context(server_process("moto S3 server", cmd, log, f"{url}/", START_TIMEOUT_S))
        yield url


def _wait_accepting(host: str, port: int, timeout_s: float) -> None:
    """`start()` returns before the socket accepts: wait for it, bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no S3 server on {host}:{port} after {timeout_s} s") from None
            time.sleep(0.05)


def new_bucket(endpoint: str, prefix: str = "kv") -> StoreLocation:
    """A fresh bucket on the server at `endpoint`; the store location inside it."""
    import pyarrow.fs as pafs

    bucket = f"penelope-{uuid.uuid4().hex[:12]}"
    url = urlsplit(endpoint)
    admin = pafs.S3FileSystem(
        endpoint_override=url.netloc, scheme=url.scheme, region=REGION,
        access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], allow_bucket_creation=True,
    )  # fmt: skip
    admin.create_dir(bucket)
    return StoreLocation(f"s3://{bucket}/{prefix}", endpoint=endpoint, region=REGION)


@contextmanager
def credentials_env() -> Iterator[None]:
    """The AWS key pair in this process's environment (so nodes started from it inherit
    it, as a user exports it on every node); the old values restored afterwards."""
    old = {k: os.environ.get(k) for k in (*CREDENTIALS, "AWS_ENDPOINT_URL")}
    os.environ.update(CREDENTIALS)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def store_bytes(location: StoreLocation) -> int:
    """Bytes of the objects under the store's root."""
    import pyarrow.fs as pafs

    fs, root = location.open()
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)
