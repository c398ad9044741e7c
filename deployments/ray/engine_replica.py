"""The engine deployment: one engine (`EngineProtocol`) per Ray Serve replica.

Besides `generate`, a replica answers Ray Serve's two hooks:

- `record_routing_stats` -> the session digest the cache-affinity router
  reads (`router.digest`), pulled by the controller every
  `request_routing_stats_period_s`;
- `record_autoscaling_stats` -> the KV pressure signals of
  `deployments.metrics.autoscaling`, averaged by Ray for the autoscaling policy.

Every output carries the replica's id, and the last one its `EngineStats`;
besides, from the moment it is up, a replica reports its stats to the ingress
(`stats_sink`) every `REPORT_PERIOD_S` and says goodbye when it leaves, and
its routing stats carry them too (Ray gives those to every ingress replica),
so every ingress's /metrics lists exactly the replicas that are up
(`deployments.ray.replica_stats`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import tokenizers
from ray import serve
from ray.serve.handle import DeploymentHandle

from cache_store import StoreStats
from deployments.api.backend import ReplicaOutput, stream_with_abort
from deployments.metrics.autoscaling import KvSignals
from deployments.ray.calls import cancel_call
from deployments.ray.replica_logs import SERVE_LOG, route_package_logs
from deployments.ray.replica_stats import REPORT_PERIOD_S, STATS_KEY, STORE_KEY, stats_to_wire
from penelope_engine.async_engine import AsyncEngine
from penelope_engine.cache.pages import PageNaming
from penelope_engine.config import EngineConfig
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.protocol import (
    DIGEST_LIMITS,
    EngineProtocol,
    EngineStats,
    GenerateRequest,
)
from penelope_engine.tokenizer import Tokenizer
from penelope_sglang.config import SGLangEngineConfig
from router.digest import build_digest

log = logging.getLogger(__name__)
REPORT_TIMEOUT_S = 5.0  # one stats report to the ingress; a late one is skipped


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as plain data, so the ingress uses exactly the engine's."""

    tokenizer_json: str
    eos_token_ids: tuple[int, ...]
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None

    @classmethod
    def of(cls, tok: Tokenizer) -> TokenizerSpec:
        return cls(
            tok.backend.to_str(),
            tuple(tok.eos_token_ids),
            tok.chat_template,
            tok.bos_token,
            tok.eos_token,
        )

    def build(self) -> Tokenizer:
        backend = tokenizers.Tokenizer.from_str(self.tokenizer_json)
        return Tokenizer(
            backend, self.eos_token_ids, self.chat_template, self.bos_token, self.eos_token
        )


@dataclass(frozen=True)
class EngineInfo:
    model_name: str
    max_model_len: int
    tokenizer: TokenizerSpec
    # How the engine names pages, for the router's first-page ids; None for an engine
    # whose page ids are its own (SGLang's): the ingress then sends none.
    page_naming: PageNaming | None = None


def _sglang_engine(config: SGLangEngineConfig) -> EngineProtocol:
    """SGLang in-process with the penelope backend (needs CUDA and sglang==0.5.23)."""
    from penelope_sglang.engine import SGLangEngine

    return SGLangEngine(config)


class EngineReplica:
    """The user class of the engine deployment (see `deployments.ray.builder`)."""

    def __init__(
        self,
        engine_config: EngineConfig | SGLangEngineConfig,
        working_set_window_s: float,
        stats_sink: str | None = None,
    ) -> None:
        """`stats_sink`: the deployment (of this app) that takes `report_stats` calls.

        Ray Serve runs this on the replica's event loop, where the reporter starts."""
        route_package_logs()
        self._engine: EngineProtocol
        if isinstance(engine_config, SGLangEngineConfig):
            self._engine = _sglang_engine(engine_config)
            page_size = engine_config.page_size
        else:
            self._engine = AsyncEngine(engine_config)
            page_size = engine_config.cache.page_size
        context = serve.get_replica_context()
        self._replica = context.replica_tag
        self._signals = KvSignals(page_size, working_set_window_s)
        self._sink: DeploymentHandle | None = None
        self._reporter: asyncio.Task[None] | None = None
        self.drained_pages: int | None = None  # set by the drain on leaving
        if stats_sink is not None:
            handle = serve.get_deployment_handle(stats_sink, app_name=context.app_name)
            self._sink = handle.options(method_name="report_stats")
            self._reporter = asyncio.get_running_loop().create_task(self._report_forever())

    async def _report_forever(self) -> None:
        engine = self._engine
        while True:
            stats, store = await asyncio.to_thread(lambda: (engine.stats(), engine.store_stats()))
            await self._report(stats, store)
            await asyncio.sleep(REPORT_PERIOD_S)

    async def _report(self, stats: EngineStats | None, store: StoreStats | None = None) -> None:
        """One report to the stats sink, within `REPORT_TIMEOUT_S` (a failed one is skipped)."""
        if self._sink is None:
            return
        response = self._sink.remote(self._replica, stats, store)
        try:
            await asyncio.wait_for(asyncio.ensure_future(response), REPORT_TIMEOUT_S)
        except asyncio.CancelledError:
            cancel_call(response)
            raise
        except Exception as exc:  # the ingress is not up yet, or busy: the next one will do
            cancel_call(response)
            log.debug("stats report to the ingress failed: %r", exc)

    async def describe(self) -> EngineInfo:
        e = self._engine
        naming = getattr(e, "page_naming", None)
        return EngineInfo(e.model_name, e.max_model_len, TokenizerSpec.of(e.tokenizer), naming)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]:
        async for item in stream_with_abort(self._engine, request, self._replica):
            yield item

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """The session endpoint's hints (`POST /v1/penelope/sessions/{id}`), on this replica."""
        return await self._engine.session_hints(session_id, tenant, hints)

    async def record_routing_stats(self) -> dict[str, Any]:
        # Off the event loop: the engine's lock is held for a whole forward step.
        return await asyncio.to_thread(self._routing_digest)

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return await asyncio.to_thread(self._kv_signals)

    def _routing_digest(self) -> dict[str, Any]:
        stats = self._engine.stats()
        digest = build_digest(
            self._engine.session_digests(DIGEST_LIMITS.sessions),
            self._engine.shared_prefix_hashes(DIGEST_LIMITS.prefix_pages),
            limit=DIGEST_LIMITS.sessions,
            queue_len=stats.queue_length + stats.running,
            now=self._engine.clock(),  # the clock of the sessions' last_access
        )
        # Ray hands routing stats to every router, so every ingress replica's /metrics
        # has every engine replica's stats (`deployments.ray.replica_stats`)
        store = self._engine.store_stats()
        wire = {STORE_KEY: dataclasses.asdict(store)} if store is not None else {}
        return {**digest, STATS_KEY: stats_to_wire(stats), **wire}

    def _kv_signals(self) -> dict[str, float]:
        digests = self._engine.session_digests(DIGEST_LIMITS.sessions)
        return self._signals.sample(self._engine.stats(), digests, now=self._engine.clock())

    async def check_health(self) -> None:
        if not self._engine.alive:
            raise RuntimeError("the engine's step thread has stopped")

    async def __del__(self) -> None:
        """Ray Serve's graceful shutdown (downscale, redeploy), once no request is left:
        drain to the store, say goodbye to the ingress, stop the engine."""
        await self._drain()
        if self._reporter is not None:
            self._reporter.cancel()
            await self._report(None)  # off the ingress's /metrics now, not after its TTL
        await self._engine.shutdown()

    async def _drain(self) -> int:
        """Hand the sessions' KV to the shared store, so their next turns load it on
        whichever replica the router picks; pages written (`drained_pages`).

        Logged on Serve's logger, so the line is in the replica's log even at 0 (the
        usual count: the writes behind stored every page already), and so is every
        session the drain could not leave whole in the store, with why. `penelope
        bench cluster` reads both there. The engine bounds the drain by its own deadline.
        """
        t0 = time.monotonic()
        try:
            report = await asyncio.to_thread(self._engine.drain_to_store)
        except Exception:  # the engine still shuts down; what the writes behind stored stands
            SERVE_LOG.exception("draining KV to the store before shutdown failed")
            return 0
        self.drained_pages = report.pages
        SERVE_LOG.info(
            "drained %d KV pages to the store before shutdown in %.2f s (pages written "
            "behind earlier are not counted)",
            report.pages,
            time.monotonic() - t0,
        )
        for session, why in report.undrained:
            SERVE_LOG.warning("could not drain session %s to the store: %s", session, why)
        return report.pages
