"""`SGLangEngine`: the `EngineProtocol` over an in-process `sglang.Engine` with Penelope's cache.

`engine: sglang` in `serve_config.yaml` selects it; the deployments, the router
and the metrics see the same async-generator interface as the torch engine.
SGLang serves on CUDA only; importing this module without SGLang installed
raises an ImportError that says how to install it.

Streaming: the engine runs with incremental streaming output, so each chunk's
`output_ids` are the new tokens of that step.

Sessions: a request's session id and harness hints travel to the scheduler in
SGLang's `kv_hints` envelope (`sessions.SessionHint.envelope`), and the session
endpoint's hints between turns on SGLang's RPC channel (`hint_rpc`); the penelope
cache keeps its per-session view, applies the hints (retain_s: a node lock,
expected_gap_s and end_session: the victim order) and reports, per request,
host hits and the ledger's evicted tokens in `cached_tokens_details`
(`digests.usage_of`). `session_digests` and `shared_prefix_hashes` read the
cache's view through SGLang's `get_internal_state` (called off the event
loop, as the protocol asks); `page_naming` lets the ingress name a prompt's
first pages as the digests do.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from penelope_engine.cache.pages import PageNaming
from penelope_engine.errors import InvalidRequestError
from penelope_engine.hints import HintGrant, SessionHints, refused
from penelope_engine.protocol import (
    DIGEST_LIMITS,
    DrainReport,
    EngineStats,
    FinishReason,
    GenerateRequest,
    RequestOutput,
    SessionDigest,
    TokenUsage,
)
from penelope_engine.tokenizer import Tokenizer
from penelope_sglang import require_sglang

require_sglang("penelope_sglang.engine (the `sglang` engine)")

import sglang  # noqa: E402

from penelope_sglang import digests  # noqa: E402
from penelope_sglang.config import SGLangEngineConfig  # noqa: E402
from penelope_sglang.hint_rpc import HintChannel  # noqa: E402
from penelope_sglang.plugin import register  # noqa: E402
from penelope_sglang.sessions import SessionHint  # noqa: E402
from penelope_sglang.views import VIEW_KEY  # noqa: E402

if TYPE_CHECKING:
    from cache_store import StoreStats


def _hf_config(model_path: str) -> dict[str, Any]:
    """The model's config.json (SGLang reads its window and vocabulary from it too)."""
    config: dict[str, Any] = json.loads((Path(model_path) / "config.json").read_text())
    return config


def sampling_dict(request: GenerateRequest) -> dict[str, Any]:
    s = request.sampling
    params: dict[str, Any] = {
        "max_new_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "ignore_eos": s.ignore_eos,
    }
    if s.stop_token_ids:
        params["stop_token_ids"] = list(s.stop_token_ids)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
    return params


_FINISH_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def finish_reason(meta: dict[str, Any]) -> FinishReason | None:
    """SGLang's finish reason as ours; a kind we do not name counts as ``stop``."""
    reason = meta.get("finish_reason")
    if not reason:
        return None
    kind = str(reason.get("type")) if isinstance(reason, dict) else str(reason)
    return _FINISH_REASONS.get(kind, "stop")


usage_of = digests.usage_of
VIEW_TIMEOUT_S = 5.0  # how long a digest read waits for the scheduler's reply


def session_hint(request: GenerateRequest) -> SessionHint | None:
    """What the penelope cache is told about the request's session (None: no session)."""
    if request.session_id is None:
        return None
    h = request.hints
    return SessionHint(request.session_id, h.retain_s, h.expected_gap_s, h.end_session)


def hint_grants(request: GenerateRequest) -> tuple[HintGrant, ...]:
    """The hints the cache applies, as asked (the SGLang backend clips none)."""
    h = request.hints
    asked: list[tuple[str, float | bool | None]] = [
        ("retain_s", h.retain_s),
        ("expected_gap_s", h.expected_gap_s),
        ("end_session", h.end_session or None),
    ]
    return tuple(HintGrant(name, value, value) for name, value in asked if value is not None)


class SGLangEngine:
    """In-process SGLang (CUDA) behind `EngineProtocol`."""

    def __init__(self, config: SGLangEngineConfig, model_name: str | None = None) -> None:
        register()
        self.config = config
        self.model_name = model_name or config.model_path
        self._engine = sglang.Engine(**config.engine_kwargs())
        self.tokenizer = Tokenizer.from_dir(config.model_path)
        hf = _hf_config(config.model_path)
        self.max_model_len = config.context_length or int(hf.get("max_position_embeddings", 32768))
        self.vocab_size = int(hf.get("vocab_size") or self.tokenizer.vocab_size)
        self.page_naming = PageNaming(config.page_size, f"sglang:{self.model_name}")
        self._hasher = self.page_naming.hasher()
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._host_tokens = 0
        self._evicted_tokens = 0
        self._running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hints: HintChannel | None = None

    async def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        if not request.prompt_token_ids:
            raise InvalidRequestError("prompt_token_ids must not be empty")
        if request.grammar is not None:
            raise InvalidRequestError(
                "structured outputs (response_format, a forced tool_choice) are served by the "
                "torch engine only, not the SGLang adapter"
            )
        hint = session_hint(request)
        stream = await self._engine.async_generate(
            input_ids=list(request.prompt_token_ids),
            sampling_params=sampling_dict(request),
            stream=True,
            rid=request.request_id,
            cache_salt=request.tenant,
            kv_hints=hint.envelope(request.request_id) if hint is not None else None,
        )
        loop = self._loop = asyncio.get_running_loop()
        start, first_token_at, completion = loop.time(), None, 0
        self._running += 1
        try:
            async for chunk in stream:
                new_ids = tuple(int(t) for t in chunk.get("output_ids", ()))
                meta = chunk.get("meta_info", {})
                completion += len(new_ids)
                if new_ids and first_token_at is None:
                    first_token_at = loop.time() - start
                reason = finish_reason(meta)
                if reason is not None:
                    self._account(meta)
                yield RequestOutput(
                    request_id=request.request_id,
                    token_ids=new_ids,
                    finished=reason is not None,
                    finish_reason=reason,
                    usage=usage_of(meta, completion),
                    ttft_s=first_token_at,
                    hints=hint_grants(request) if reason is not None and hint else (),
                )
        except (asyncio.CancelledError, GeneratorExit):
            self._engine.tokenizer_manager.abort_request(rid=request.request_id)
            raise
        finally:
            self._running -= 1

    async def abort(self, request_id: str) -> bool:
        """Abort a request in SGLang's scheduler (its pages are released there)."""
        self._engine.tokenizer_manager.abort_request(rid=request_id)
        return True

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """Hints between turns, applied to the penelope cache's session record in the
        scheduler (`hint_rpc`, `between_turns`); `no_session` where this process has no
        RPC channel to the scheduler (a node other than SGLang's rank 0)."""
        socket = getattr(self._engine, "send_to_rpc", None)
        if socket is None:
            return refused(hints, "no_session")
        if self._hints is None:
            self._hints = HintChannel(socket)
        return await asyncio.to_thread(self._hints.send, session_id, tenant, hints)

    def _account(self, meta: dict[str, Any]) -> None:
        usage = usage_of(meta, 0)
        self._prompt_tokens += usage.prompt_tokens
        self._cached_tokens += usage.device_tokens
        self._host_tokens += usage.host_tokens
        self._evicted_tokens += usage.recomputed_tokens

    def stats(self) -> EngineStats:
        cached = self._cached_tokens + self._host_tokens
        tokens = TokenUsage(
            prompt_tokens=self._prompt_tokens,
            device_tokens=self._cached_tokens,
            host_tokens=self._host_tokens,
            recomputed_tokens=self._evicted_tokens,
            new_tokens=self._prompt_tokens - cached - self._evicted_tokens,
        )
        return EngineStats(tokens=tokens, running=self._running)

    def recent_stats(self) -> EngineStats:
        """`stats`: counters this adapter keeps itself, read without waiting."""
        return self.stats()

    def view(self) -> dict[str, Any]:
        """The penelope cache's snapshot (`views.SessionViews.snapshot`); {} before the
        first request or without the penelope backend. Call it off the event loop."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return {}
        try:
            if asyncio.get_running_loop() is loop:
                raise RuntimeError("SGLangEngine.view() blocks: call it off the event loop")
        except RuntimeError as exc:
            if "off the event loop" in str(exc):
                raise
        manager = self._engine.tokenizer_manager
        future = asyncio.run_coroutine_threadsafe(manager.get_internal_state(), loop)
        states = future.result(timeout=VIEW_TIMEOUT_S)
        view = states[0].get(VIEW_KEY) if states else None
        return view if isinstance(view, dict) else {}

    def store_stats(self) -> StoreStats | None:
        """None: SGLang spills to its own storage backends, not to Penelope's Arrow store."""
        return None

    def session_digests(self, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]:
        """Per session: device and host tokens the penelope cache still holds, last access."""
        return digests.session_digests(self.view(), limit)

    def clock(self) -> float:
        """The cache's clock: monotonic seconds, shared by the scheduler process."""
        return time.monotonic()

    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        """Page ids (Penelope's naming, `page_naming`) of the cache's shared device prefixes."""
        return digests.shared_prefix_hashes(self.view(), self._hasher, limit)

    def drain_to_store(self) -> DrainReport:
        """SGLang's own storage backends hold its spilled KV; nothing to hand over here."""
        return DrainReport()

    def check_integrity(self) -> None:
        """A no-op: SGLang's scheduler checks its own pools for leaks when idle."""

    @property
    def alive(self) -> bool:
        """Always True: SGLang does not report its subprocesses' health to the adapter.

        (A failed SGLang child sends SIGQUIT to this process; SGLang's handler then
        ends the process tree, when the engine was built on the main thread.)
        """
        return True

    async def shutdown(self) -> None:
        self._engine.shutdown()
