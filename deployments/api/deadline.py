"""Per-request deadlines (`api.request_timeout_s`), counted from the request's arrival.

When a deadline passes, the awaited work is cancelled; cancelling a request's
output stream aborts it in the engine, which frees its locks and pages at
once. The client then gets 504 in OpenAI's error shape, or, once an SSE stream
has started, an error event followed by `[DONE]`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

from deployments.api.errors import ApiError


def request_timeout(timeout_s: float) -> ApiError:
    return ApiError(
        504,
        f"The request did not finish within {timeout_s:g} s (api.request_timeout_s) and was "
        "aborted.",
        type="timeout_error",
        code="request_timeout",
    )


@dataclass(frozen=True)
class Deadline:
    """The moment (`time.perf_counter()`) a request must be done by."""

    at: float
    timeout_s: float

    @classmethod
    def after(cls, start: float, timeout_s: float) -> Deadline:
        return cls(start + timeout_s, timeout_s)

    def remaining(self) -> float:
        return max(0.0, self.at - time.perf_counter())

    def error(self) -> ApiError:
        return request_timeout(self.timeout_s)

    @contextmanager
    def enforced(self) -> Iterator[None]:
        """Cancel the block (in this task) when the deadline passes; then raise the 504 error.

        No task is spawned, so async generators awaited in the block are never
        left running elsewhere when the block ends.
        """
        with anyio.move_on_after(self.remaining()) as scope:
            yield
        if scope.cancelled_caught:
            raise self.error()
