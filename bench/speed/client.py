"""One streamed `/v1/completions` request over token ids, timed chunk by chunk."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from bench.client import completion_body
from bench.net import usage_tokens


@dataclass
class Stream:
    """When a request was sent and when each chunk carrying a token arrived (monotonic)."""

    sent: float
    chunk_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ttft_s(self) -> float:
        return self.chunk_times[0] - self.sent


def complete(
    url: str,
    model: str,
    prompt: list[int],
    max_tokens: int,
    timeout_s: float,
    session: str | None = None,
) -> Stream:
    """Greedy, streamed, with usage, `max_tokens` tokens even past EOS (``ignore_eos``, which
    vLLM and SGLang take too); raises on an HTTP error or a stream without tokens."""
    body = completion_body(model, prompt, max_tokens, ignore_eos=True)
    headers = {"x-session-id": session} if session else {}
    stream = Stream(sent=time.monotonic())
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers, timeout=timeout_s
    ) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: status {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                _take(stream, json.loads(line[6:]))
    if not stream.chunk_times:
        raise RuntimeError(f"{url}: the stream carried no token")
    return stream


def _take(stream: Stream, chunk: dict) -> None:  # type: ignore[type-arg]
    for choice in chunk.get("choices") or ():
        finish = choice.get("finish_reason")
        if choice.get("text") or finish is None:  # not a bare closing chunk
            stream.chunk_times.append(time.monotonic())
        stream.finish_reason = finish or stream.finish_reason
    usage = chunk.get("usage")
    if usage:
        stream.prompt_tokens, stream.completion_tokens, stream.cached_tokens = usage_tokens(usage)
