"""One request's engine outputs as text deltas: stop strings, usage, TTFT and ITL.

`Generation` wraps the backend's output stream of one prepared request: the first
output is awaited apart (`start`), so what the engine raises up front surfaces
before any response starts; then each output's tokens become text through the
stop strings (`TextStream`), and the last output's usage and hints make the
reply's report. Every API's reply shape (`deployments.api.openai_stream`, the
Anthropic API's `deployments.api.anthropic.replies`) reads it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from deployments.api.backend import Backend, ReplicaOutput
from deployments.api.deadline import Deadline
from deployments.api.errors import ApiError
from deployments.api.openai_bodies import Report
from deployments.api.prepare import Prepared
from deployments.api.textstream import TextStream
from deployments.metrics.series import ApiMetrics
from penelope_engine.protocol import FinishReason, RequestOutput, TokenUsage


class Generation:
    """One request's outputs turned into text deltas; usage at the end."""

    def __init__(self, prepared: Prepared, backend: Backend, metrics: ApiMetrics) -> None:
        self._prepared = prepared
        self._metrics = metrics
        self._text = TextStream(backend.tokenizer, prepared.stop)
        self._outputs = aiter(backend.generate(prepared.request))
        self._first: ReplicaOutput | None = None
        self._last_step: float | None = None
        self.replica = ""
        self.usage = TokenUsage()
        self.last: RequestOutput | None = None  # the engine's last output (hints, edits)
        self.finish_reason: FinishReason | None = None
        self.completion_tokens = 0

    async def start(self) -> None:
        """Wait for the first output; raises what the engine raised."""
        try:
            self._first = await anext(self._outputs)
        except StopAsyncIteration as exc:
            raise ApiError(500, "The engine returned no output.", type="server_error") from exc
        self.replica = self._first.replica

    async def deltas(self) -> AsyncGenerator[str, None]:
        assert self._first is not None, "call start() first"
        item = self._first
        while True:
            delta = self._take(item)
            if delta:
                yield delta
            if item.output.finished or self._text.stopped:
                break
            item = await anext(self._outputs)
        tail = self._text.flush()
        if tail:
            yield tail

    @property
    def final_usage(self) -> Report:
        u = self.usage
        usage = replace(
            u,
            prompt_tokens=u.prompt_tokens or len(self._prepared.request.prompt_token_ids),
            completion_tokens=self.completion_tokens,
        )
        last = self.last
        if last is None or not last.finished:
            return Report(usage)
        return Report(usage, last.hints, last.prompt_edit_at)

    @property
    def prompt_usage(self) -> TokenUsage:
        """Where the prompt's tokens came from, known from the first output on."""
        if self._first is not None and self._first.output.usage.prompt_tokens:
            return self._first.output.usage
        return replace(self.usage, prompt_tokens=len(self._prepared.request.prompt_token_ids))

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that ended the text, if one did."""
        return self._text.stop_hit

    async def close(self) -> None:
        aclose = getattr(self._outputs, "aclose", None)
        if aclose is not None:
            await aclose()

    def _take(self, item: ReplicaOutput) -> str:
        out = item.output
        self.usage = out.usage if out.usage.prompt_tokens else self.usage
        self.last = out
        self.finish_reason = out.finish_reason
        if out.token_ids:
            self._observe_step()
            self.completion_tokens += len(out.token_ids)
        delta = self._text.push(out.token_ids)
        if self._text.stopped:
            self.finish_reason = "stop"
        return delta

    def _observe_step(self) -> None:
        now = time.perf_counter()
        if self._last_step is None:
            self._metrics.ttft.labels(self.replica).observe(now - self._prepared.arrival)
        else:
            self._metrics.itl.labels(self.replica).observe(now - self._last_step)
        self._last_step = now


async def timed_deltas(gen: Generation, deadline: Deadline) -> AsyncGenerator[str, None]:
    """The generation's text deltas; each wait for one is bounded by the deadline."""
    async with aclosing(gen.deltas()) as deltas:
        while True:
            try:
                with deadline.enforced():
                    delta = await anext(deltas)
            except StopAsyncIteration:
                return
            yield delta


async def collect_text(gen: Generation) -> str:
    """The generation's whole text (a reply that is not streamed)."""
    async with aclosing(gen.deltas()) as deltas:
        return "".join([d async for d in deltas])
