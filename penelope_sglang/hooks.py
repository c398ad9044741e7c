"""Scheduler hooks that run Penelope's refills, registered through SGLang's `HookRegistry`.

AROUND hooks; the first three are no-ops unless the scheduler's tree cache is a
`PenelopeRadixCache` with holes enabled:

- `Scheduler._add_request_to_queue`: a new request that matches a hole with a
  cached suffix is parked, and its refill request (`refill`) is queued instead;
- `Scheduler.get_next_batch_to_run`: requests whose refill has been released
  (its insert reconnected the suffix) are queued before each batch is formed;
- `SchedulerOutputStreamer.stream_output`: a refill's output never reaches the
  detokenizer (nobody asked for it);
- `Scheduler.get_internal_state`: the reply carries the cache's per-session
  view (`views.SessionViews.snapshot`, under `views.VIEW_KEY`) for the adapter;
- `SchedulerOutputStreamer.get_cached_tokens_details`: a request's details
  carry the miss ledger's evicted count (`digests.EVICTED_KEY`): prompt tokens
  its session had cached once (`PenelopeRadixCache.note_request`) and that
  were not cached for it now;
- `Scheduler.handle_rpc_request`: the session endpoint's hints (`hint_rpc`,
  method `HINTS_METHOD`) are applied to the cache's session records
  (`between_turns.apply`) and answered with their grants; other RPCs run as
  before. Without a penelope cache every hint is refused (`no_session`).

`_add_request_to_queue` also hands every new request to `note_request`
(session hints, known tokens) before planning its refill.

A refill's release comes from `PenelopeRadixCache.on_release`; an aborted refill
releases its request through `Scheduler._release_aborted_request`.
"""

from __future__ import annotations

import copy
from array import array
from collections.abc import Callable
from typing import Any

from sglang.srt.managers.io_struct import RpcReqOutput
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from penelope_engine.hints import refused
from penelope_sglang import between_turns, hint_rpc
from penelope_sglang.digests import EVICTED_KEY, REFILLED_KEY
from penelope_sglang.radix_cache import PenelopeRadixCache
from penelope_sglang.refill import RefillCoordinator, RefillPlan, is_refill_rid
from penelope_sglang.views import VIEW_KEY

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
STREAMER = "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer"

_registered = False


def coordinator_of(scheduler: Any) -> RefillCoordinator | None:
    cache = getattr(scheduler, "tree_cache", None)
    if isinstance(cache, PenelopeRadixCache) and cache.holes_enabled:
        return cache.refills
    return None


def request_key(req: Any) -> RadixKey:
    """What SGLang's own match of a new request looks at: all but its last prompt token."""
    tokens = array("q", req.origin_input_ids[:-1])
    return RadixKey(
        tokens, getattr(req, "extra_key", None), cache_salt=getattr(req, "cache_salt", None)
    )


def make_refill_req(req: Any, plan: RefillPlan) -> Req:
    """A prefill-only request for `plan`: the real request's settings, one output token."""
    sampling = copy.copy(req.sampling_params)
    sampling.max_new_tokens = 1
    refill = Req(
        rid=plan.rid,
        origin_input_text="",
        origin_input_ids=plan.token_ids,
        sampling_params=sampling,
        eos_token_ids=getattr(req, "eos_token_ids", None),
        vocab_size=getattr(req, "vocab_size", None),
        extra_key=getattr(req, "extra_key", None),
        cache_salt=getattr(req, "cache_salt", None),
    )
    refill.tokenizer = getattr(req, "tokenizer", None)
    return refill


def add_request_to_queue(
    original: Callable[..., Any], scheduler: Any, req: Any, is_retracted: bool = False
) -> Any:
    coordinator = coordinator_of(scheduler)
    if coordinator is None or is_retracted or is_refill_rid(req.rid):
        return original(scheduler, req, is_retracted)
    key = request_key(req)
    if not hasattr(req, "penelope_known_tokens"):  # once per request (a parked one returns)
        scheduler.tree_cache.note_request(req, key)
    plan = coordinator.plan(key, req)
    if plan is None:
        return original(scheduler, req, is_retracted)
    return original(scheduler, make_refill_req(req, plan), False)


def get_next_batch_to_run(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    coordinator = coordinator_of(scheduler)
    if coordinator is not None:
        for req in coordinator.take_ready():
            scheduler._add_request_to_queue(req)  # noqa: SLF001 - SGLang: its scheduler's queue
    return original(scheduler, *args, **kwargs)


def release_aborted_request(
    original: Callable[..., Any], scheduler: Any, req: Any, *args: Any, **kwargs: Any
) -> Any:
    result = original(scheduler, req, *args, **kwargs)
    coordinator = coordinator_of(scheduler)
    if coordinator is not None and is_refill_rid(req.rid):
        coordinator.release(req.rid)
    return result


def stream_output(
    original: Callable[..., Any], streamer: Any, reqs: list[Any], *args: Any, **kwargs: Any
) -> Any:
    visible = [req for req in reqs if not is_refill_rid(req.rid)]
    if reqs and not visible:
        return None
    return original(streamer, visible, *args, **kwargs)


def get_internal_state(original: Callable[..., Any], scheduler: Any, *args: Any, **kw: Any) -> Any:
    result = original(scheduler, *args, **kw)
    cache = getattr(scheduler, "tree_cache", None)
    state = getattr(result, "internal_state", None)
    if isinstance(cache, PenelopeRadixCache) and isinstance(state, dict):
        state[VIEW_KEY] = cache.views.snapshot()
    return result


def evicted_tokens(req: Any) -> int:
    """Prompt tokens the request's session had cached once and that were computed for it:
    missed now, or recomputed by its refill request (which SGLang then counts as cached)."""
    known = getattr(req, "penelope_known_tokens", 0)
    refilled = getattr(req, "penelope_refilled_tokens", 0)
    prompt = len(getattr(req, "origin_input_ids", ()))
    cached = int(getattr(req, "cached_tokens", 0) or 0) - refilled
    return max(0, min(known, prompt) - cached)


def get_cached_tokens_details(
    original: Callable[..., Any], streamer: Any, req: Any, *args: Any, **kwargs: Any
) -> Any:
    details = original(streamer, req, *args, **kwargs)
    evicted = evicted_tokens(req)
    if not evicted:
        return details
    details = dict(details) if details else {"device": 0, "host": 0}
    details[EVICTED_KEY] = evicted
    details[REFILLED_KEY] = getattr(req, "penelope_refilled_tokens", 0)
    return details


def handle_rpc_request(
    original: Callable[..., Any], scheduler: Any, recv_req: Any, *args: Any, **kwargs: Any
) -> Any:
    if getattr(recv_req, "method", None) != hint_rpc.HINTS_METHOD:
        return original(scheduler, recv_req, *args, **kwargs)
    try:
        session, tenant, hints = hint_rpc.hints_of(dict(recv_req.parameters or {}))
    except (KeyError, TypeError, ValueError) as exc:  # InvalidRequestError is a ValueError
        return RpcReqOutput(rid=recv_req.rid, success=False, message=str(exc))
    cache = getattr(scheduler, "tree_cache", None)
    if isinstance(cache, PenelopeRadixCache):
        grants = between_turns.apply(cache, session, tenant, hints, cache.evictor.clock())
    else:
        grants = refused(hints, "no_session")
    return hint_rpc.reply(recv_req.rid, grants)


HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (f"{SCHEDULER}._add_request_to_queue", add_request_to_queue),
    (f"{SCHEDULER}.get_next_batch_to_run", get_next_batch_to_run),
    (f"{SCHEDULER}._release_aborted_request", release_aborted_request),
    (f"{STREAMER}.stream_output", stream_output),
    (f"{SCHEDULER}.get_internal_state", get_internal_state),
    (f"{STREAMER}.get_cached_tokens_details", get_cached_tokens_details),
    (f"{SCHEDULER}.handle_rpc_request", handle_rpc_request),
)


def register_scheduler_hooks() -> None:
    """Register the hooks once; SGLang's `load_plugins` applies them."""
    global _registered
    if _registered:
        return
    for target, hook in HOOKS:
        HookRegistry.register(target, hook, HookType.AROUND)
    _registered = True
