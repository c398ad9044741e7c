"""`AsyncEngine`: the `EngineProtocol` over `Engine`, with the step loop on its own thread.

Only the step thread touches the engine's requests. `generate` and `abort`
post a typed message (`_Add`, `_Abort`) to an inbox that the thread drains
between two steps; the thread sends each request's new tokens to its asyncio
queue, so the event loop never waits for a forward step. Cancelling a
consumer aborts its request. With a shared store, a turn's last output
waits (briefly) for its session record (`Sequence.recorded`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cache_store import ArrowSegmentStore, PathRecord, StoreStats
from penelope_engine.config import EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.errors import EngineError
from penelope_engine.hints import HintGrant, SessionHints
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import (
    DIGEST_LIMITS,
    DrainReport,
    EngineStats,
    GenerateRequest,
    RequestOutput,
    SessionDigest,
)
from penelope_engine.sched.sequence import Sequence, output_of

log = logging.getLogger(__name__)
SHUTDOWN_TIMEOUT_S = 5.0  # a step is milliseconds to seconds; past this the loop is stuck
RECORD_WAIT_S = 2.0  # a turn's last output waits this long at most for its session record


@dataclass
class _Listener:
    """Where the step thread sends one request's outputs (owned by that thread)."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[tuple[RequestOutput, Exception | None]]
    emitted: int  # tokens of the sequence already sent


@dataclass(frozen=True)
class _Add:
    """Queue `request`; `accepted` settles once it is (or with the engine's refusal)."""

    request: GenerateRequest
    listener: _Listener
    accepted: asyncio.Future[None]
    record: PathRecord | None = None  # the session's history in the shared store


@dataclass(frozen=True)
class _Abort:
    """Abort a request; `done`, if given, gets whether it was running."""

    request_id: str
    done: asyncio.Future[bool] | None = None


def _settle(future: asyncio.Future[Any], exc: Exception | None, result: object = None) -> None:
    if not future.done():
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)


async def _when_recorded(
    listener: _Listener,
    item: tuple[RequestOutput, Exception | None],
    recorded: concurrent.futures.Future[bool],
) -> None:
    """A turn's last output, once the store has the session's record (at most
    `RECORD_WAIT_S`): a next turn served elsewhere then finds what was seen."""
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(recorded)), RECORD_WAIT_S)
    except Exception as exc:  # late or failed: the turn ends anyway
        log.info("the session record was not written in time: %r", exc)
    listener.queue.put_nowait(item)


class AsyncEngine:
    """`EngineProtocol` over `Engine`, with the step loop on a background thread.

    A step that raises fails the requests it was running and the loop goes on.
    """

    def __init__(
        self,
        config: EngineConfig,
        loaded: LoadedModel | None = None,
        store: ArrowSegmentStore | None = None,
    ) -> None:
        self.engine = Engine(config, loaded, store)
        self.model_name = self.engine.model_name
        self.tokenizer = self.engine.tokenizer
        self.max_model_len = self.engine.max_model_len
        self.page_naming = self.engine.page_naming
        self.vocab_size = self.engine.vocab_size
        self._lock = threading.Lock()  # the engine, for the step thread and stats readers
        self._wake = threading.Event()
        self._inbox: queue.SimpleQueue[_Add | _Abort] = queue.SimpleQueue()
        self._listeners: dict[str, _Listener] = {}
        self._readers = 0  # threads waiting to read the engine; the loop yields to them
        self._closed = False
        self._recent = self.engine.stats()  # refreshed by the step thread as requests finish
        self._thread = threading.Thread(target=self._loop, name="penelope-engine", daemon=True)
        self._thread.start()

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    # -- the step thread -----------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            with self._lock:
                self._take_inbox()
                busy = self.engine.has_work()
                try:
                    done = self.engine.step() if busy else []
                except Exception as exc:  # a fault must not stop the other requests
                    log.exception("engine step failed; failing the running requests")
                    done = self.engine.fail_running(exc)
                if any(seq.finish_reason is not None for seq in done):
                    self._recent = self.engine.stats()  # before the last outputs go out
                for seq in done:
                    self._emit(seq)
            if self._readers:  # let a stats reader in between two steps
                time.sleep(0.0005)
            if not busy:
                self._wake.wait(0.05)
                self._wake.clear()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """The engine's lock for a reader; the step loop would otherwise re-take it at once."""
        self._readers += 1
        try:
            with self._lock:
                yield
        finally:
            self._readers -= 1

    def _take_inbox(self) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            match item:
                case _Abort(request_id, done):
                    self._listeners.pop(request_id, None)
                    found = self.engine.abort(request_id)
                    if done is not None:
                        done.get_loop().call_soon_threadsafe(_settle, done, None, found)
                case _Add(request, listener, accepted, record):
                    try:
                        self.engine.add_request(request, record)
                    except Exception as exc:  # invalid or too large: the caller raises it
                        listener.loop.call_soon_threadsafe(_settle, accepted, exc)
                        continue
                    self._listeners[request.request_id] = listener
                    listener.loop.call_soon_threadsafe(_settle, accepted, None)

    def _emit(self, seq: Sequence) -> None:
        listener = self._listeners.get(seq.request_id)
        if listener is None:
            return
        out = output_of(seq, listener.emitted)
        listener.emitted += len(out.token_ids)
        if out.finished:
            del self._listeners[seq.request_id]
        item = (out, seq.error)
        if out.finished and seq.recorded is not None and not seq.recorded.done():
            coro = _when_recorded(listener, item, seq.recorded)
            asyncio.run_coroutine_threadsafe(coro, listener.loop)
        else:
            listener.loop.call_soon_threadsafe(listener.queue.put_nowait, item)

    def _post(self, item: _Add | _Abort) -> None:
        self._inbox.put(item)
        self._wake.set()

    # -- EngineProtocol ------------------------------------------------------------------
    async def generate(self, request: GenerateRequest) -> AsyncIterator[RequestOutput]:
        loop = asyncio.get_running_loop()
        listener = _Listener(loop, asyncio.Queue(), len(request.prompt_token_ids))
        accepted: asyncio.Future[None] = loop.create_future()
        finished = False
        record = None
        if self.engine.store.has_store:
            record = await asyncio.to_thread(self.engine.store.fetch_record, request)
        if request.grammar is not None:  # the first grammar builds llguidance's vocabulary
            await asyncio.to_thread(self.engine.warm_grammars)
        self._post(_Add(request, listener, accepted, record))
        try:
            await accepted  # raises the engine's InvalidRequestError / CapacityError
            while True:
                out, error = await listener.queue.get()
                if error is not None:
                    finished = True
                    raise error
                if out.token_ids or out.finished:
                    yield out
                if out.finished:
                    finished = True
                    return
        finally:
            if not finished:  # the consumer left: free the request's pages
                self._post(_Abort(request.request_id))

    async def abort(self, request_id: str) -> bool:
        """Abort a request and return once its pages are free; False if it is not here."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._post(_Abort(request_id, done))
        return await done

    async def session_hints(
        self, session_id: str, tenant: str, hints: SessionHints
    ) -> list[HintGrant]:
        """Apply a harness's hints to an idle session, between two steps."""

        def apply() -> list[HintGrant]:
            with self._reading():
                return self.engine.session_hints(session_id, tenant, hints)

        return await asyncio.to_thread(apply)

    def stats(self) -> EngineStats:
        with self._reading():
            return self.engine.stats()

    def recent_stats(self) -> EngineStats:
        """The stats the step thread took after the last step in which a request finished
        (one immutable snapshot: no lock, no wait for the running step)."""
        return self._recent

    def store_stats(self) -> StoreStats | None:
        return self.engine.store.store_stats()  # the store has its own lock

    def session_digests(self, limit: int = DIGEST_LIMITS.sessions) -> list[SessionDigest]:
        with self._reading():
            return self.engine.session_digests(limit)

    def clock(self) -> float:
        return self.engine.clock()  # a clock read: no need to wait for the step

    def shared_prefix_hashes(self, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
        with self._reading():
            return self.engine.shared_prefix_hashes(limit)

    def drain_to_store(self) -> DrainReport:
        with self._reading():
            return self.engine.store.drain_to_store()

    def check_integrity(self) -> None:
        with self._reading():
            self.engine.check_integrity()

    @property
    def alive(self) -> bool:
        """The step thread is running (for health checks)."""
        return self._thread.is_alive() and not self._closed

    async def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop the step loop; `EngineError` with the thread's stack if it is still busy."""
        self._closed = True
        self._wake.set()
        await asyncio.to_thread(self._thread.join, timeout_s)
        await asyncio.to_thread(self.engine.store.close, timeout_s)
        if self._thread.is_alive():
            frame = sys._current_frames().get(self._thread.ident or -1)  # noqa: SLF001 - Python: the stuck step thread's stack
            where = "".join(traceback.format_stack(frame)[-6:]) if frame else "(no frame)\n"
            raise EngineError(
                f"the engine's step thread did not stop within {timeout_s:g} s of shutdown; "
                f"it is at:\n{where}"
            )
