"""`penelope bench side`: real routers side by side on this machine, through the HTTP API.

    penelope bench side [--sessions 8] [--turns 5] [--sglang-router-python PATH] [--json]

The same seeded Claude Code sessions (`bench.side.plan`: text prompts, one
token per trace block, tool gaps scaled and capped) are replayed once per
router set-up (`bench.side.config`) through the OpenAI API, as streamed
`/v1/completions` with the session in `x-session-id`: Ray Serve's default
power-of-two router, Ray Serve LLM's `PrefixCacheAffinityRouter`, ours, each
in the Ray Serve app on a local Ray (tiny Qwen3, two engine replicas), and
sgl-router in front of two `penelope serve` processes when its interpreter is
given. The client runs in a spawned process under a deadline
(`bench.child.run_child`). Per set-up: mean and p90 TTFT, requests, failures
and the hit ratio from `usage`. A set-up that fails is reported with its error
and the next one runs; the exit status is 1 if any failed. Set-ups run one
after the other, so a machine whose load changes meanwhile skews the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from typing import Any

from bench.child import run_child
from bench.side.config import MODEL, RAY_SETUPS, SGL_ROUTER, SideConfig, serve_args
from bench.side.plan import SessionPlan, describe, plan_sessions


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import add_config_args, parser

    ap = parser("penelope bench side", __doc__)
    add_config_args(ap, SideConfig)
    ap.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    return ap


def table(result: dict[str, Any]) -> str:
    cols = ("router", "mean_ttft_s", "p90_ttft_s", "requests", "failed", "hit_ratio")
    rows = [cols] + [
        tuple("-" if e.get(c) is None else str(e[c]) for c in cols) for e in result["setups"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    for e in result["setups"]:
        if "error" in e or "skipped" in e:
            lines.append(f"{e['router']}: {e.get('error') or e.get('skipped')}")
    return "\n".join(lines)


def _failed(router: str, why: str, key: str = "error") -> dict[str, Any]:
    return {"router": router, "mean_ttft_s": None, "p90_ttft_s": None, "requests": 0,
            "failed": 0, "hit_ratio": None, key: why}  # fmt: skip


def _replay(
    router: str, plans: tuple[SessionPlan, ...], url: str, cfg: SideConfig
) -> dict[str, Any]:
    from bench.side.client import CLIENT_STARTUP_S, client_main, summarize

    t0 = time.monotonic()
    records = run_child(
        client_main,
        (plans, url, MODEL, cfg.run_timeout_s),
        timeout_s=cfg.run_timeout_s + CLIENT_STARTUP_S,
        name=f"side-client-{router}",
    )
    return {**summarize(router, records), "elapsed_s": round(time.monotonic() - t0, 1)}


def _ray_setups(cfg: SideConfig, plans: tuple[SessionPlan, ...]) -> list[dict[str, Any]]:
    from bench.side.ray_app import local_ray, serve_setup
    from deployments.ray.serve_config import parse_serve_config

    config = parse_serve_config(serve_args(cfg))
    setups = [s for s in cfg.setups if s in RAY_SETUPS]
    out: list[dict[str, Any]] = []
    try:
        with local_ray():
            for setup in setups:
                print(f"side: {setup} ...", file=sys.stderr, flush=True)
                try:
                    with serve_setup(setup, config, cfg.startup_timeout_s) as url:
                        out.append(_replay(setup, plans, url, cfg))
                except Exception as exc:  # the next set-up still runs; this one reports why
                    out.append(_failed(setup, f"{type(exc).__name__}: {exc}"))
    except Exception as exc:  # Ray itself did not start (or stop)
        done = {e["router"] for e in out}
        out += [
            _failed(s, f"local Ray: {type(exc).__name__}: {exc}") for s in setups if s not in done
        ]
    return out


def _sgl_setup(cfg: SideConfig, plans: tuple[SessionPlan, ...]) -> dict[str, Any]:
    if not cfg.sglang_router_python:
        return _failed(SGL_ROUTER, "no --sglang-router-python given", key="skipped")
    from bench.side.sgl import sgl_fleet

    print(f"side: {SGL_ROUTER} ...", file=sys.stderr, flush=True)
    try:
        with sgl_fleet(cfg, cfg.sglang_router_python) as url:
            return _replay(SGL_ROUTER, plans, url, cfg)
    except Exception as exc:
        return _failed(SGL_ROUTER, f"{type(exc).__name__}: {exc}")


def run_side(cfg: SideConfig) -> dict[str, Any]:
    """Every set-up of `cfg`, one after the other; Ray's and the servers' chatter on stderr."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Ray's log config shows each GET
    with contextlib.redirect_stdout(sys.stderr):
        return _run_side(cfg)


def _run_side(cfg: SideConfig) -> dict[str, Any]:
    t0 = time.monotonic()
    plans = plan_sessions(cfg)
    by_name: dict[str, dict[str, Any]] = {}
    if any(s in RAY_SETUPS for s in cfg.setups):
        by_name.update((e["router"], e) for e in _ray_setups(cfg, plans))
    if SGL_ROUTER in cfg.setups:
        by_name[SGL_ROUTER] = _sgl_setup(cfg, plans)
    setups = [by_name[s] for s in cfg.setups]
    return {
        "bench": "side",
        "config": {**dataclasses.asdict(cfg), "model": MODEL},
        "workload": describe(plans),
        "setups": setups,
        "elapsed_s": round(time.monotonic() - t0, 1),
        "ok": all("error" not in e and e["failed"] == 0 for e in setups),
    }


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json = args.pop("json")
    args["setups"] = tuple(s.strip() for s in args["setups"].split(",") if s.strip())
    try:
        cfg = SideConfig(**args)
    except ValueError as exc:
        print(f"penelope bench side: {exc}", file=sys.stderr)
        return 2
    result = run_side(cfg)
    if as_json:
        print(json.dumps(result))
    print(table(result), file=sys.stderr if as_json else sys.stdout)
    return 0 if result["ok"] else 1
