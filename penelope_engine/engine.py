"""The torch engine's synchronous step loop, `Engine`.

`Engine` is single-threaded: only its caller touches the cache. Its async face,
`penelope_engine.async_engine.AsyncEngine`, runs `Engine.step` on one
background thread and is what the deployments serve.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from cache_store import ArrowSegmentStore, PathRecord
from penelope_engine.cache.pages import PageNaming
from penelope_engine.checks import check_request, turn_stop
from penelope_engine.config import EngineConfig, ModelConfig
from penelope_engine.core import BenchHooks, CoreHooks, build_core
from penelope_engine.device_memory import sized_for_device
from penelope_engine.engine_store import EngineStore
from penelope_engine.errors import ConfigError, EngineError, InvalidRequestError
from penelope_engine.grammar import GrammarMasks
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.inspection import Inspection
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.parts import (
    decode_graphs,
    kv_fingerprint,
    kv_pools,
    open_store,
    page_identity,
    segment_writer,
    served_window,
    session_handover,
    torch_tiers,
)
from penelope_engine.protocol import (
    DIGEST_LIMITS,
    EngineStats,
    GenerateRequest,
    RequestOutput,
    SessionDigest,
)
from penelope_engine.runner import ModelRunner, PartialStep
from penelope_engine.sched.sequence import BatchItem, Sequence, output_of

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        loaded: LoadedModel | None = None,
        store: ArrowSegmentStore | None = None,
        hooks: CoreHooks | None = None,
        bench: BenchHooks | None = None,
    ) -> None:
        """`hooks`: the core's clock (None: `time.monotonic`); `bench`: what a bench or
        `penelope verify` injects (`BenchHooks`); None: serving."""
        self._load(config, loaded)
        # on CUDA with a memory fraction: device_pages from what the weights and a step leave
        config, self.memory_plan = sized_for_device(config, self._loaded, self.max_model_len)
        self.config = config
        mc, cc = self._loaded.config, config.cache
        self._host_pages = cc.active_host_pages
        self._device_pool, self._host_pool = kv_pools(config, mc)
        fingerprint = kv_fingerprint(config, self.model_name)
        self._store = store if store is not None else open_store(cc, fingerprint)
        self._page_naming, self._hasher, self._public = page_identity(cc, fingerprint)
        bench = bench or BenchHooks()
        writes = segment_writer(config, self._store)
        spill = writes.spill if writes is not None and bench.spills_behind else None
        self._calibrator, self._tiers = torch_tiers(
            config, mc, self._device_pool, self._host_pool, self._store, self._public, spill,
            bench.on_copy,
        )  # fmt: skip
        self._core = build_core(
            config.cache,
            config.scheduler,
            self._tiers,
            self._hasher,
            hooks or CoreHooks(),
            bench,
            calibrated=lambda: self._calibrator.cost,
            has_store=self._store is not None,
            max_model_len=self.max_model_len,
            eos_token_ids=tuple(self.tokenizer.eos_token_ids),
            on_forget=(lambda sids: self.store.forget(sids),),
            turn_stop=self.turn_stop,
        )
        self._cache, self._scheduler = self._core.cache, self._core.scheduler
        book = self._sessions = self._core.sessions
        self._handover = session_handover(cc, self._store, self._tiers, self._cache, book, writes)
        self.store = EngineStore(self._store, self._handover, self._public, book, self._tiers)
        self._grammars = GrammarMasks(self.tokenizer, self.vocab_size)
        self._runner = ModelRunner(
            self._loaded.model,
            self._device_pool,
            config.seed,
            self._grammars,
            bench.on_logits,
            attention=config.attention,
            graphs=decode_graphs(config, self._loaded.model, self._device_pool, self.max_model_len),
        )
        self._seqs: dict[str, Sequence] = {}

    # -- the face's reads ------------------------------------------------------------
    def inspect(self) -> Inspection:
        """What a bench, `penelope verify` or a test reads beside serving: the core this
        engine steps (the one the simulator shares), one forward on the model, the
        bounded counts (`Inspection`); nothing rewires the engine through it."""
        return Inspection(self._core, self._runner.run, self._handover)

    @property
    def model_config(self) -> ModelConfig:
        """The loaded model's architecture (`/model_info` reports its type)."""
        return self._loaded.config

    @property
    def page_naming(self) -> PageNaming:
        """How this engine names its pages (router digests name them the same way)."""
        return self._page_naming

    def warm_grammars(self) -> None:
        """Build the grammar vocabulary now (seconds, once) instead of at the first request
        with a grammar."""
        self._grammars.warm()

    def _load(self, config: EngineConfig, loaded: LoadedModel | None) -> None:
        """The model, its tokenizer and its limits."""
        c = config
        self._loaded = loaded or load_model(c.model, c.dtype, c.device, c.weights)
        if (held := getattr(self._loaded.model, "weights", "float")) != c.weights:
            raise ConfigError(f"the model passed in holds {held} weights, the config {c.weights}")
        mc = self._loaded.config
        self.model_name = mc.name if config.model.startswith("/") else config.model
        self.tokenizer = self._loaded.tokenizer
        self.max_model_len = served_window(config, mc)
        self.vocab_size = mc.vocab_size

    # -- requests --------------------------------------------------------------------
    def add_request(self, req: GenerateRequest, record: PathRecord | None = None) -> Sequence:
        """Validate and queue a request. Raises InvalidRequestError; changes nothing then.

        `record` is the session's path record (`fetch_record`), when it has one."""
        check_request(req, self._seqs, self.max_model_len, self.vocab_size, self.config.cache)
        public = self._public.pages(req.prompt_token_ids)
        seq = Sequence(
            req,
            self._hasher.hashes(req.prompt_token_ids, req.tenant, public),
            list(req.prompt_token_ids),
            public_pages=public,
        )
        self._grammars.attach(seq)
        self._seqs[req.request_id] = seq
        if self._handover is not None and req.session_id is not None:
            self._handover.arrived(req.tenant, req.session_id, record)
        self._scheduler.add(seq)
        return seq

    def turn_stop(self, seq: Sequence) -> str | None:
        """How `seq`'s turn ended (`checks.turn_stop`: its hint, or its reply's tool call)."""
        return turn_stop(seq, self.tokenizer)

    def abort(self, request_id: str) -> bool:
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            return False
        seq.finish_reason = seq.finish_reason or "abort"
        if seq.finish_reason == "abort":
            self._scheduler.finish(seq, None, aborted=True)
        return True

    def session_hints(self, session_id: str, tenant: str, hints: SessionHints) -> list[HintGrant]:
        """A harness's hints for an idle session, after its turn ended (the session endpoint
        `POST /v1/penelope/sessions/{id}`): `Scheduler.session_hints`."""
        if hints.parent_session is not None:
            raise InvalidRequestError("parent_session is a request's hint, not a session's")
        return self._scheduler.session_hints(session_id, tenant, hints)

    def has_work(self) -> bool:
        return self._scheduler.has_work()

    def step(self) -> list[Sequence]:
        """Run one batch; return sequences that produced a token (finished ones included)."""
        items = self._scheduler.schedule()
        if not items:
            failed = self._scheduler.break_deadlock()
            if failed is not None:
                self._seqs.pop(failed.request_id, None)
            return [failed] if failed is not None else []
        t0 = time.perf_counter()
        if self._core.bench.step_observer is not None:
            self._core.bench.step_observer(items)
        try:
            tokens = self._runner.run(items)
        except PartialStep as partial:  # out of device memory: only the items that did not fit
            return self._commit_apart(items, partial)
        self._observe(items, time.perf_counter() - t0)
        return self._commit(items, tokens)

    def _commit(self, items: list[BatchItem], tokens: list[int | None]) -> list[Sequence]:
        out = self._scheduler.commit(items, tokens)
        for seq in out:
            if seq.finish_reason is not None:
                self._seqs.pop(seq.request_id, None)
                if self._handover is not None and seq.req.session_id is not None:
                    seq.recorded = self._handover.turn_ended(seq.req.tenant, seq.req.session_id)
        return out

    def _commit_apart(self, items: list[BatchItem], partial: PartialStep) -> list[Sequence]:
        """Commit the items that ran; fail the requests whose share did not fit alone."""
        kept = [i for i in range(len(items)) if i not in partial.failed]
        out = self._commit([items[i] for i in kept], [partial.tokens[i] for i in kept])
        errors = {items[i].seq: error for i, error in partial.failed.items()}
        for seq, error in errors.items():
            log.warning("request %s failed: %s", seq.request_id, error)
        return out + self._fail(errors)

    def _observe(self, items: list[BatchItem], seconds: float) -> None:
        """Feed a prefill-only step of one request to the cost model's calibration."""
        if len(items) == 1 and len(items[0].positions) > 1:
            pos = items[0].positions
            m = len(pos)
            start = max(0, int(round(float(pos.mean()) - (m - 1) / 2)))
            self._calibrator.observe_prefill(start, m, seconds)

    def fail_running(self, exc: Exception) -> list[Sequence]:
        """A step raised: fail the requests it was running, keep the rest queued."""
        error = EngineError(f"the engine failed while running this request: {exc}")
        return self._fail(dict.fromkeys(self._scheduler.running, error))

    def _fail(self, errors: Mapping[Sequence, Exception]) -> list[Sequence]:
        """End these running requests with these errors, releasing what they held."""
        for seq, error in errors.items():
            seq.finish_reason = "abort"
            seq.error = error
            self._seqs.pop(seq.request_id, None)
            try:
                self._scheduler.finish(seq, None, aborted=True)
            except Exception:  # the failed step may have left this request half-updated
                log.exception("could not release request %s", seq.request_id)
                self._scheduler.discard(seq)
        return list(errors)

    def generate_sync(self, req: GenerateRequest) -> RequestOutput:
        """Run one request to completion on the calling thread (tools, tests)."""
        seq = self.add_request(req, self.store.fetch_record(req))
        while seq.finish_reason is None:
            self.step()
            if seq.error is not None:
                raise seq.error
        return output_of(seq, seq.prompt_len)

    # -- observability -------------------------------------------------------------------
    def stats(self) -> EngineStats:
        t, c = self._scheduler.totals, self._cache.stats()
        return EngineStats(
            tokens=t,
            pages_device_used=c.device_used,
            pages_device_total=c.device_total,
            pages_host_used=c.host_used,
            pages_host_total=c.host_total,
            evictions=c.evictions,
            queue_length=len(self._scheduler.waiting),
            running=len(self._scheduler.running),
            request_pages=self._scheduler.request_pages(),
            locked_nodes=c.locked_nodes,
            tree_nodes=c.tree_nodes,
            session_records=c.session_records,
            **(self._handover.fault_counts() if self._handover is not None else {}),
        )

    def session_digests(self, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]:
        return self._sessions.digests(self._cache.page_size, limit)

    def clock(self) -> float:
        """Now, in the sessions' clock (the one `SessionDigest.last_access` uses)."""
        return self._sessions.now

    def check_integrity(self) -> None:
        self._cache.check_integrity(request_pages=self._scheduler.request_pages())
        self._scheduler.check()

    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        """Page ids of shared prefixes this replica holds on the device (router digests)."""
        return self._cache.shared_prefix_hashes(limit)
