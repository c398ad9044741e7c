"""The benches' local networking: a free port, waiting for a server, reading its usage.

`free_port` asks the kernel for an unused TCP port on 127.0.0.1 (another
process may take it before the caller binds it; on one machine that race is
rare). `wait_http` polls a URL until it answers 200, with a deadline; given
`alive`, the process behind the URL is checked before each try, so one that
died fails the wait at once instead of at the deadline. `usage_tokens` reads
an OpenAI `usage` object as `bench speed` and `bench versus` record it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx

POLL_S = 0.5
REQUEST_TIMEOUT_S = 5.0


class ServerExited(RuntimeError):
    """The process behind the URL exited before the URL answered."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free when asked."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str,
    deadline_s: float,
    alive: Callable[[], bool] | None = None,
    poll_s: float = POLL_S,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> None:
    """Until GET `url` answers 200, trying every `poll_s` for `deadline_s` seconds from now.

    TimeoutError naming `url` and the last failure once the deadline passes;
    `ServerExited` as soon as `alive()` (checked before each try) is false.
    One try may run `request_timeout_s` past the deadline.
    """
    deadline = time.monotonic() + deadline_s
    last = "no try"
    while True:
        if alive is not None and not alive():
            raise ServerExited(f"the process behind {url} exited before it answered")
        try:
            r = httpx.get(url, timeout=request_timeout_s)
            if r.status_code == 200:
                return
            last = f"status {r.status_code}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{url} did not answer 200 within {deadline_s:g} s (last: {last})")
        time.sleep(min(poll_s, left))


def usage_tokens(usage: dict[str, Any]) -> tuple[int, int, int]:
    """An OpenAI `usage` object's prompt, completion and cached prompt tokens (0: absent)."""
    details = usage.get("prompt_tokens_details") or {}
    return (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(details.get("cached_tokens") or 0),
    )
