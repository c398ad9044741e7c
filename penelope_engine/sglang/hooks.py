"""Scheduler hooks that run Penelope's refills, registered through SGLang's `HookRegistry`.

Three AROUND hooks, each a no-op unless the scheduler's tree cache is a
`PenelopeRadixCache` with holes enabled:

- `Scheduler._add_request_to_queue`: a new request that matches a hole with a
  cached suffix is parked, and its refill request (`refill`) is queued instead;
- `Scheduler.get_next_batch_to_run`: requests whose refill has been released
  (its insert reconnected the suffix) are queued before each batch is formed;
- `SchedulerOutputStreamer.stream_output`: a refill's output never reaches the
  detokenizer (nobody asked for it).

A refill's release comes from `PenelopeRadixCache.on_release`; an aborted refill
releases its request through `Scheduler._release_aborted_request`.
"""

from __future__ import annotations

import copy
from array import array
from collections.abc import Callable
from typing import Any

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from penelope_engine.sglang.radix_cache import PenelopeRadixCache
from penelope_engine.sglang.refill import RefillCoordinator, RefillPlan, is_refill_rid

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
    plan = coordinator.plan(request_key(req), req)
    if plan is None:
        return original(scheduler, req, is_retracted)
    return original(scheduler, make_refill_req(req, plan), False)


def get_next_batch_to_run(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    coordinator = coordinator_of(scheduler)
    if coordinator is not None:
        for req in coordinator.take_ready():
            scheduler._add_request_to_queue(req)
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


HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (f"{SCHEDULER}._add_request_to_queue", add_request_to_queue),
    (f"{SCHEDULER}.get_next_batch_to_run", get_next_batch_to_run),
    (f"{SCHEDULER}._release_aborted_request", release_aborted_request),
    (f"{STREAMER}.stream_output", stream_output),
)


def register_scheduler_hooks() -> None:
    """Register the hooks once; SGLang's `load_plugins` applies them."""
    global _registered
    if _registered:
        return
    for target, hook in HOOKS:
        HookRegistry.register(target, hook, HookType.AROUND)
    _registered = True
