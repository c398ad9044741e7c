"""`penelope serve`: the OpenAI-compatible server and one engine in one process, no Ray.

    penelope serve [--host 127.0.0.1] [--port 8000] [--model smollm2-135m]

It runs what serve_config.yaml deploys on Ray Serve, one replica of it: the same
model, cache (512 device pages, a host tier of 1024 written through, the Arrow
store in ~/.cache/penelope/store with a 2 GiB budget, `return_aware` eviction),
scheduler and agent levers (`penelope_engine.shipped`). What differs, and why:
one process and one engine (no router, no autoscaling: there is one replica),
and no Ray. `--store-uri none` serves without a store (and so without prefetch
or the hand-over between replicas); `--host-pages 0` without a host tier.

Options become an `EngineConfig` and `ApiSettings`; the server itself is
`deployments.api.standalone.serve_standalone`.
"""

from __future__ import annotations

import argparse
import dataclasses

from deployments.api.settings import ApiSettings, load_api_keys
from deployments.api.standalone import serve_standalone
from deployments.api.tools.parsers import PARSER_CHOICES
from penelope_cli.helpformat import add_field_args, parser
from penelope_engine.cache.eviction import EVICTION_POLICIES
from penelope_engine.config import AgentConfig, CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.shipped import (
    SHIPPED_DEVICE_PAGES,
    SHIPPED_HOST_FACTOR,
    SHIPPED_MAX_BATCH_TOKENS,
    SHIPPED_MAX_RUNNING,
    SHIPPED_MODEL,
    SHIPPED_POLICY,
    SHIPPED_STORE_BYTES,
    SHIPPED_STORE_URI,
    shipped_cache,
    shipped_scheduler,
)

# The options that are config fields, by config: name, type, choices and help come from
# the field (`helpformat.add_field_args`); the defaults are what `penelope serve` serves.
ENGINE_OPTIONS = ("model", "device", "dtype", "weights", "attention")
CACHE_OPTIONS = ("page_size", "device_pages", "device_kv_bytes", "device_memory_fraction")
STORE_OPTIONS = ("store_bytes", "policy")
SESSION_OPTIONS = (
    "session_ttl_s",
    "max_session_records",
    "tenant_pin_seconds",
    "tenant_pin_tokens",
    "store_endpoint",
    "store_region",
    "write_behind_bytes",
    "store_read_budget_s",
    "store_record_budget_s",
    "store_request_timeout_s",
    "store_probe_s",
)
SCHEDULER_OPTIONS = ("max_running", "max_batch_tokens", "max_prefills")
AGENT_OPTIONS = ("admission", "starvation_s")
AS_SHIPPED = ("max_prefills", *AGENT_OPTIONS)  # default None: what ships on --device
API_OPTIONS = ("max_pending", "default_temperature")


def add_serve_args(ap: argparse.ArgumentParser) -> None:
    """The `penelope serve` options."""
    ap.add_argument("--host", default="127.0.0.1", help="bind address")
    ap.add_argument("--port", type=int, default=8000, help="TCP port")
    add_field_args(ap, EngineConfig, ENGINE_OPTIONS, defaults={"model": SHIPPED_MODEL})
    add_field_args(ap, CacheConfig, CACHE_OPTIONS, defaults={"device_pages": SHIPPED_DEVICE_PAGES})
    ap.add_argument(
        "--host-pages",
        type=int,
        default=None,
        help=f"KV pages in host memory (default: {SHIPPED_HOST_FACTOR} x the device; 0: no tier)",
    )
    ap.add_argument(
        "--store-uri",
        default=SHIPPED_STORE_URI,
        help=f"{_help(CacheConfig, 'store_uri')}; none: no store",
    )
    add_field_args(
        ap,
        CacheConfig,
        STORE_OPTIONS,
        defaults={"store_bytes": SHIPPED_STORE_BYTES, "policy": SHIPPED_POLICY},
        choices={"policy": sorted(EVICTION_POLICIES)},
    )
    ap.add_argument(
        "--agent-levers",
        choices=("shipped", "off"),
        default="shipped",
        help="shipped: return-aware retention, parking, backfill, a prefill chunk of a quarter "
        "step; on a CPU one prefill at a time, shortest first, on CUDA aged order "
        "(`penelope_engine.shipped`); off: FCFS, chunk of half a step",
    )
    add_field_args(ap, AgentConfig, AGENT_OPTIONS, defaults=dict.fromkeys(AGENT_OPTIONS))
    add_field_args(ap, CacheConfig, SESSION_OPTIONS)
    add_field_args(
        ap,
        SchedulerConfig,
        SCHEDULER_OPTIONS,
        defaults={
            "max_running": SHIPPED_MAX_RUNNING,
            "max_batch_tokens": SHIPPED_MAX_BATCH_TOKENS,
            "max_prefills": None,
        },
    )
    add_field_args(ap, ApiSettings, API_OPTIONS)
    ap.add_argument(
        "--api-keys-file",
        default=None,
        help="file of 'key[:tenant]' lines, with $PENELOPE_API_KEYS (neither: no auth)",
    )
    add_field_args(
        ap,
        ApiSettings,
        ("metrics_require_auth", "tool_parser"),
        choices={"tool_parser": PARSER_CHOICES},
    )
    ap.add_argument("--log-level", default="info", help="uvicorn log level")


def _help(config: type, name: str) -> str:
    return str(next(f for f in dataclasses.fields(config) if f.name == name).metadata["help"])


def build_parser() -> argparse.ArgumentParser:
    """`penelope serve`'s parser (`main` takes what it parses)."""
    ap = parser("penelope serve", __doc__)
    add_serve_args(ap)
    return ap


def config_from_args(args: argparse.Namespace) -> tuple[EngineConfig, ApiSettings]:
    host = SHIPPED_HOST_FACTOR * args.device_pages if args.host_pages is None else args.host_pages
    store = None if args.store_uri.strip().lower() in ("", "none") else args.store_uri
    cache = shipped_cache(
        args.device_pages,
        args.page_size,
        store_uri=store,
        store_bytes=args.store_bytes,
        host_pages=host,
        policy=args.policy,
        session_ttl_s=args.session_ttl_s,
        max_session_records=args.max_session_records,
        tenant_pin_seconds=args.tenant_pin_seconds,
        tenant_pin_tokens=args.tenant_pin_tokens,
        store_endpoint=args.store_endpoint,
        store_region=args.store_region,
        write_behind_bytes=args.write_behind_bytes,
        store_read_budget_s=args.store_read_budget_s,
        store_request_timeout_s=args.store_request_timeout_s,
        store_probe_s=args.store_probe_s,
        device_memory_fraction=args.device_memory_fraction,
        device_kv_bytes=args.device_kv_bytes,
    )
    engine = EngineConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        weights=args.weights,
        attention=args.attention,
        cache=cache,
        scheduler=_scheduler(args),
    )
    settings = ApiSettings(
        api_keys=load_api_keys(args.api_keys_file),
        max_pending=args.max_pending,
        default_temperature=args.default_temperature,
        metrics_require_auth=args.metrics_require_auth,
        tool_parser=args.tool_parser,
    )
    return engine, settings


def _scheduler(args: argparse.Namespace) -> SchedulerConfig:
    """What ships on `--device` (or the levers off), with the options given over it."""
    tokens = args.max_batch_tokens
    base = (
        shipped_scheduler(tokens, args.max_running, device=args.device)
        if args.agent_levers == "shipped"
        else SchedulerConfig(
            max_running=args.max_running, max_batch_tokens=tokens, prefill_chunk=tokens // 2
        )
    )
    given = {k: getattr(args, k) for k in AS_SHIPPED if getattr(args, k) is not None}
    agent = dataclasses.replace(
        base.agent, **{k: given.pop(k) for k in AGENT_OPTIONS if k in given}
    )
    return dataclasses.replace(base, agent=agent, **given)


def main(args: argparse.Namespace) -> int:
    engine, settings = config_from_args(args)
    serve_standalone(
        args.host, args.port, engine_config=engine, settings=settings, log_level=args.log_level
    )
    return 0
