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

from deployments.api.settings import ApiSettings, load_api_keys
from deployments.api.standalone import serve_standalone
from deployments.api.tools.parsers import PARSER_CHOICES
from deployments.ray.serve_config import DEFAULT_MODEL
from penelope_cli.helpformat import parser
from penelope_engine.cache.eviction import EVICTION_POLICIES
from penelope_engine.config import DTYPE_NAMES, CacheConfig, EngineConfig, SchedulerConfig
from penelope_engine.shipped import (
    SHIPPED_HOST_FACTOR,
    SHIPPED_POLICY,
    SHIPPED_STORE_BYTES,
    SHIPPED_STORE_URI,
    shipped_cache,
    shipped_scheduler,
)

# serve_config.yaml's engine (a test holds them equal): one of its replicas
DEVICE_PAGES, MAX_RUNNING, MAX_BATCH_TOKENS = 512, 16, 2048


def add_serve_args(ap: argparse.ArgumentParser) -> None:
    """The `penelope serve` options."""
    d, c = EngineConfig(), CacheConfig()
    a = ApiSettings()
    ap.add_argument("--host", default="127.0.0.1", help="bind address")
    ap.add_argument("--port", type=int, default=8000, help="TCP port")
    ap.add_argument(
        "--model", default=DEFAULT_MODEL, help="registered model name or checkpoint directory"
    )
    ap.add_argument("--device", default=d.device, help="cpu or cuda[:N]")
    ap.add_argument(
        "--dtype", default=d.dtype, choices=DTYPE_NAMES, help="model dtype"
    )
    ap.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    ap.add_argument("--device-pages", type=int, default=DEVICE_PAGES, help="KV pages on the device")
    ap.add_argument(
        "--host-pages",
        type=int,
        default=None,
        help=f"KV pages in host memory (default: {SHIPPED_HOST_FACTOR} x the device; 0: no tier)",
    )
    ap.add_argument(
        "--store-uri",
        default=SHIPPED_STORE_URI,
        help="Arrow store under the host tier: a path or s3:// URI; none: no store",
    )
    ap.add_argument(
        "--store-bytes", type=int, default=SHIPPED_STORE_BYTES, help="the store's byte budget"
    )
    ap.add_argument(
        "--policy",
        default=SHIPPED_POLICY,
        choices=sorted(EVICTION_POLICIES),
        help="eviction policy (default: what ships, `penelope_engine.shipped`)",
    )
    ap.add_argument(
        "--agent-levers",
        choices=("shipped", "off"),
        default="shipped",
        help="shipped: aged order, backfill, return-aware retention, parking and a prefill "
        "chunk of a quarter step (`penelope_engine.shipped`); off: FCFS, chunk of half a step",
    )
    ap.add_argument(
        "--session-ttl-s",
        type=float,
        default=c.session_ttl_s,
        help="drop an idle session's record once it holds no cached page after this long",
    )
    ap.add_argument(
        "--max-session-records",
        type=int,
        default=c.max_session_records,
        help="session records kept at most (the least recently used idle ones go first)",
    )
    ap.add_argument(
        "--tenant-pin-seconds",
        type=float,
        default=c.tenant_pin_seconds,
        help="longest pin a harness's retain_s hint gets; longer ones are clipped",
    )
    ap.add_argument(
        "--tenant-pin-tokens",
        type=int,
        default=c.tenant_pin_tokens,
        help="tokens one tenant's hinted pins may hold at once (default: no per-tenant quota)",
    )
    ap.add_argument(
        "--store-endpoint", default=None, help="an S3-compatible server's URL"
    )
    ap.add_argument("--store-region", default=None, help="the S3 region")
    ap.add_argument(
        "--write-behind-bytes",
        type=int,
        default=c.write_behind_bytes,
        help="KV bytes queued for the store at once (the write-behind cap)",
    )
    for name in ("store_read_budget_s", "store_request_timeout_s", "store_probe_s"):
        ap.add_argument(
            "--" + name.replace("_", "-"),
            type=float,
            default=getattr(c, name),
            help=f"`CacheConfig.{name}` (deployments/README.md)",
        )
    ap.add_argument(
        "--max-running", type=int, default=MAX_RUNNING, help="most requests running at once"
    )
    ap.add_argument(
        "--max-batch-tokens", type=int, default=MAX_BATCH_TOKENS, help="most tokens of one step"
    )
    ap.add_argument(
        "--max-pending",
        type=int,
        default=a.max_pending,
        help="admitted unfinished requests before 429",
    )
    ap.add_argument(
        "--api-keys-file",
        default=None,
        help="file of 'key[:tenant]' lines, with $PENELOPE_API_KEYS (neither: no auth)",
    )
    ap.add_argument(
        "--metrics-require-auth", action="store_true", help="/metrics needs an API key too"
    )
    ap.add_argument(
        "--tool-parser",
        default=a.tool_parser,
        choices=PARSER_CHOICES,
        help="the model's tool-call format (auto: read from its chat template)",
    )
    ap.add_argument("--log-level", default="info", help="uvicorn log level")


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
    )
    tokens = args.max_batch_tokens
    engine = EngineConfig(
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        cache=cache,
        scheduler=(
            shipped_scheduler(tokens, args.max_running)
            if args.agent_levers == "shipped"
            else SchedulerConfig(
                max_running=args.max_running, max_batch_tokens=tokens, prefill_chunk=tokens // 2
            )
        ),
    )
    settings = ApiSettings(
        api_keys=load_api_keys(args.api_keys_file),
        max_pending=args.max_pending,
        metrics_require_auth=args.metrics_require_auth,
        tool_parser=args.tool_parser,
    )
    return engine, settings


def main(args: argparse.Namespace) -> int:
    engine, settings = config_from_args(args)
    serve_standalone(
        args.host, args.port, engine_config=engine, settings=settings, log_level=args.log_level
    )
    return 0
