"""A real-CLI bench's verdict and report, and its `penelope bench <cli>` main.

The JSON: `ok`, `cache_ok`, `requests` (each as the server saw it), `exit_codes`,
`runs` (each with its reply), and per request `prompt_tokens`, `cached_tokens` and
`shared_prefix_tokens` (the longest token prefix it shares with an earlier request's
prompt: what a cache could serve). `cache_ok`: both runs sent requests, every one was
answered 200, and the second run's were served mostly from cache (cached >=
`--min-cached` of their prompt tokens). `ok`: that, and the bench's own `clean` (both
runs exited 0 and printed the model's reply, with no warning the CLI should not give).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.agent_cli.harness import MISSING_EXIT, Install, Session
from bench.agent_cli.proxy import Seen
from bench.tokens import shared_prefixes

Render = Callable[[dict[str, Any]], list[int]]  # a request body -> its prompt's token ids
SUMMARY_KEYS = ("ok", "cache_ok", "exit_codes", "seconds", "second_run_cached_ratio")


def cache_report(
    session: Session,
    min_cached: float,
    clean: bool,
    head: dict[str, Any],
    counts: Callable[[dict[str, Any]], tuple[int, int]],
    renderer: Callable[[], Render],
    summary: Callable[[Seen], dict[str, Any]],
) -> dict[str, Any]:
    """The report: the verdicts, `head` (the CLI's version, the model), then the figures.

    `counts` reads a reply's usage as (prompt tokens, cached tokens); `renderer` builds
    the server's prompt of a request body (only if any request came), which gives each
    request's `shared_prefix_tokens`; `summary` says what to show of each request."""
    runs, log = session.runs, session.log
    pairs = [counts(s.usage) for s in log]
    prompt, cached = [p for p, _ in pairs], [c for _, c in pairs]
    shared = _shared([s.body for s in log], renderer()) if log else []
    second = runs[1]["requests"] if len(runs) > 1 else []
    second_ratio = sum(cached[i] for i in second) / max(1, sum(prompt[i] for i in second))
    cache_ok = (
        len(runs) == 2
        and all(r["requests"] for r in runs)
        and all(s.status == 200 for s in log)
        and second_ratio >= min_cached
    )
    ok = cache_ok and clean
    return {
        "ok": ok,
        "cache_ok": cache_ok,
        **head,
        "seconds": round(session.seconds, 1),
        "exit_codes": [r["exit_code"] for r in runs],
        "runs": runs,
        "requests": [summary(s) for s in log],
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "shared_prefix_tokens": shared,
        "second_run_cached_ratio": round(second_ratio, 4),
        "min_cached": min_cached,
        "server_log_tail": session.server_log if not ok else "",
    }


def _shared(bodies: list[dict[str, Any]], render: Render) -> list[int]:
    """Per request: the longest prompt-token prefix shared with an earlier request's prompt."""

    def prompt(body: dict[str, Any]) -> list[int] | None:
        try:
            return render(body)
        except Exception:  # noqa: BLE001 (the server refused it too: no prompt to share)
            return None

    return shared_prefixes([prompt(b) for b in bodies])


def cli_parser(name: str, doc: str | None, install: Install) -> argparse.ArgumentParser:
    """`--json`, the executable (`--<binary>`, as `cli`), `--timeout-s`, `--min-cached`."""
    from penelope_cli.helpformat import parser

    ap = parser(f"penelope bench {name}", doc)
    ap.add_argument("--json", metavar="OUT", default=None, help="write the report here")
    ap.add_argument(
        f"--{install.binary}", dest="cli", metavar="PATH", default=None,
        help=f"the {install.binary} executable (default: {install.folder})",
    )  # fmt: skip
    ap.add_argument(
        "--timeout-s", type=float, default=600.0, help=f"bound on each {install.binary} run"
    )
    ap.add_argument(
        "--min-cached", type=float, default=0.8, help="share of run 2's prompt tokens cached"
    )
    return ap


def cli_main(
    name: str, install: Install, args: argparse.Namespace, run: Callable[[str], dict[str, Any]]
) -> int:
    """Find the CLI (exit 2 saying why not), run the bench, write or print the report."""
    exe, why = install.find(args.cli)
    if exe is None:
        print(f"penelope bench {name}: {why}", file=sys.stderr)
        return MISSING_EXIT
    report = run(exe)
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(json.dumps({k: report[k] for k in SUMMARY_KEYS}), file=sys.stderr)
    if not args.json:
        print(text)
    return 0 if report["ok"] else 1
