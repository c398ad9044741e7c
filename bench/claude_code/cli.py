"""`penelope bench claude-code`: the Claude Code CLI against `penelope serve`, twice, one session.

    penelope bench claude-code [--json OUT] [--setup NAME] [--claude PATH] [--timeout-s 600]

Starts `penelope serve` with the set-up's model on 127.0.0.1, puts a recording
proxy in front of it (`proxy`), and runs `claude -p PROMPT` and then
`claude -p --continue PROMPT` in one scratch directory with `ANTHROPIC_BASE_URL`
pointing at the proxy, a dummy API key, every model name set to the served one,
the model's real window in `CLAUDE_CODE_MAX_CONTEXT_TOKENS` (so Claude Code
neither warns that it does not know the model nor assumes a 1M-token window), and
its telemetry, error reports, auto-update and other non-essential traffic off
(`claude_env`). Two set-ups (`setups.SETUPS`, `--setup`):

    smollm2-135m    the bundled SmolLM2-135M (real weights: it ends its turns) in
                    its 8K window, with Claude Code's own `--bare` mode (its short
                    system prompt, its Bash, Edit and Read tools, no hooks, plugins
                    or CLAUDE.md; the environment notes in the system prompt rather
                    than in a system turn after the question, which SmolLM2 takes for
                    the last word and never answers). The default; both runs exit 0.
                    Claude Code sends no temperature; the server samples such
                    requests greedily (`--default-temperature 0`), so a run is
                    repeatable (at 1.0 SmolLM2 now and then rambled past the
                    256-token cap and that run exited 1: 1 run in 5).
    tiny-qwen3-64k  Claude Code's whole prompt (~12K tokens, its tools) on the tiny
                    random-weight Qwen3 with a 64K window: the long-prompt cache
                    figures. The random model never ends its turn, so each reply
                    stops at max_tokens, Claude Code exits 1 saying so, and `ok` is
                    false (`cache_ok` holds the cache verdict).

The JSON: `ok`, `requests` (each `/v1/messages` request as the server saw
it), `exit_codes`, and per request `prompt_tokens`, `cached_tokens` and
`shared_prefix_tokens` (the longest token prefix it shares with an earlier
request's prompt, which is what a cache could serve). `ok` means both runs
exited 0 and printed the model's reply without an unknown-model warning, every
request was answered 200, and the second run's requests were served mostly
from cache (cached >= `--min-cached` of their prompt tokens); `cache_ok` is
the last two alone.

Claude Code comes from npm, pinned (`CLAUDE_CODE_VERSION`), installed into
`.claude-code/` (git-ignored): `npm install --prefix .claude-code
@anthropic-ai/claude-code@VERSION` (`make claude-code`). Without node or that
package this says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.child import server_process
from bench.claude_code.setups import SETUPS, Setup
from bench.net import free_port
from bench.tokens import shared_prefixes as common_prefixes

if TYPE_CHECKING:
    from penelope_engine.tokenizer import Tokenizer

CLAUDE_CODE_VERSION = "2.1.332"
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".claude-code"
DUMMY_KEY = "sk-penelope-bench-dummy"
MISSING_EXIT = 2
UNKNOWN_MODEL = "doesn't recognize the model"  # Claude Code's warning for a model it lacks


def find_claude(explicit: str | None = None) -> tuple[str | None, str]:
    """The `claude` executable, or None and why not."""
    if explicit:
        return (explicit, "") if Path(explicit).is_file() else (None, f"{explicit} not found")
    if shutil.which("node") is None:
        return None, "node is not on PATH (Claude Code needs it to install)"
    found = INSTALL_DIR / "node_modules" / ".bin" / "claude"
    if not found.exists():
        return None, (
            f"Claude Code is not installed in {INSTALL_DIR}: run `npm install --prefix "
            f".claude-code @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}` in the repository"
        )
    return str(found), ""


def claude_env(base_url: str, home: Path, setup: Setup) -> dict[str, str]:
    """What Claude Code needs to talk only to this server: no telemetry, a dummy key, the
    served model's name and its window. Auto-compact is off: two short runs never need it,
    and in an 8K window its threshold sits below the first prompt."""
    model = setup.model
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(setup.window),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(setup.max_output_tokens),
        "DISABLE_AUTO_COMPACT": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
        "CLAUDE_CODE_USE_BEDROCK": "0",
        "CLAUDE_CODE_USE_VERTEX": "0",
    }


def serve_argv(port: int, setup: Setup) -> list[str]:
    cmd = [sys.executable, "-m", "penelope_cli.cli", "serve", "--model", setup.model]
    # No store: a run starts cold, whatever earlier runs left in ~/.cache.
    cmd += ["--device-pages", str(setup.device_pages), "--store-uri", "none"]
    cmd += ["--default-temperature", str(setup.default_temperature)]
    return cmd + ["--port", str(port), "--log-level", "warning"]


def shared_prefixes(bodies: list[dict[str, Any]], tokenizer: Tokenizer) -> list[int]:
    """Per request: the longest prompt-token prefix shared with an earlier request's prompt."""
    from deployments.api.anthropic.schemas import MessagesRequest
    from deployments.api.anthropic.session import session_of
    from deployments.api.anthropic.translate import to_chat
    from deployments.api.prepare import render_chat
    from deployments.api.settings import ApiSettings

    def prompt(body: dict[str, Any]) -> list[int] | None:
        try:
            request = MessagesRequest.model_validate(body)
            chat = to_chat(request, session_of(request, {})).chat
            return render_chat(chat, tokenizer, ApiSettings())[0]
        except Exception:  # noqa: BLE001 (the server refused it too: no prompt to share)
            return None

    return common_prefixes([prompt(b) for b in bodies])


def run_bench(
    claude: str, timeout_s: float, min_cached: float, setup: Setup = SETUPS["smollm2-135m"]
) -> dict[str, Any]:
    from bench.claude_code.proxy import Seen, recording_proxy
    from deployments.api.standalone import background_server

    started = time.monotonic()
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    path = str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")
    serve_env = dict(os.environ, PYTHONPATH=path)
    with tempfile.TemporaryDirectory(prefix="penelope-claude-code-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        (work / "README.md").write_text("A scratch project for the Claude Code bench.\n")
        log: list[Seen] = []
        runs: list[dict[str, Any]] = []
        base, serve_log = f"http://127.0.0.1:{port}", Path(tmp) / "serve.log"
        try:
            with (
                server_process("penelope serve", serve_argv(port, setup), serve_log,
                               f"{base}/health", min(timeout_s, 180.0), env=serve_env,
                               grace_s=30.0),
                background_server(recording_proxy(base, log)) as url,
            ):  # fmt: skip
                env = claude_env(url, home, setup)
                for i, prompt in enumerate(setup.prompts):
                    args = [claude, "-p", *(["--continue"] if i else []), prompt]
                    args += ["--max-turns", "2", *setup.claude_args]
                    first = len(log)
                    run = _run(args, work, env, timeout_s)
                    runs.append({**run, "requests": list(range(first, len(log)))})
        finally:
            server_log = serve_log.read_text(errors="replace")[-2000:]
    return _report(log, runs, min_cached, time.monotonic() - started, server_log, setup)


def _run(args: list[str], work: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """One `claude -p`: its exit code, its reply (stdout) and whether it printed one."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(args, cwd=work, env=env, capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)  # fmt: skip
        code, out = done.returncode, done.stdout.decode(errors="replace")
        err = done.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        code, out, err = 124, "", "timed out"
    return {
        "exit_code": code,
        "reply": out.strip()[:600],
        "reply_printed": _reply_printed(out),
        "unknown_model_warning": UNKNOWN_MODEL in out + err,
        "seconds": round(time.monotonic() - t0, 1),
        "output_tail": (out + err)[-600:],
    }


def _report(
    log: list[Any],
    runs: list[dict[str, Any]],
    min_cached: float,
    seconds: float,
    server_log: str,
    setup: Setup,
) -> dict[str, Any]:
    prompt = [_prompt_tokens(s.usage) for s in log]
    cached = [int(s.usage.get("cache_read_input_tokens", 0)) for s in log]
    shared = shared_prefixes([s.body for s in log], setup.tokenizer()) if log else []
    second = runs[1]["requests"] if len(runs) > 1 else []
    second_ratio = sum(cached[i] for i in second) / max(1, sum(prompt[i] for i in second))
    cache_ok = (
        len(runs) == 2
        and all(r["requests"] for r in runs)
        and all(s.status == 200 for s in log)
        and second_ratio >= min_cached
    )
    clean = all(
        r["exit_code"] == 0 and r["reply_printed"] and not r["unknown_model_warning"] for r in runs
    )
    ok = cache_ok and clean
    return {
        "ok": ok,
        "cache_ok": cache_ok,
        "claude_code_version": CLAUDE_CODE_VERSION,
        "model": setup.model,
        "seconds": round(seconds, 1),
        "exit_codes": [r["exit_code"] for r in runs],
        "runs": runs,
        "requests": [s.summary() for s in log],
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "shared_prefix_tokens": shared,
        "second_run_cached_ratio": round(second_ratio, 4),
        "min_cached": min_cached,
        "server_log_tail": server_log if not ok else "",
    }


def _reply_printed(stdout: str) -> bool:
    """`claude -p` printed a reply: text on stdout that is not its own error line."""
    text = stdout.strip()
    return bool(text) and not text.startswith(("API Error", "Error:"))


def _prompt_tokens(usage: dict[str, Any]) -> int:
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(usage.get(k, 0)) for k in keys)


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("penelope bench claude-code", __doc__)
    ap.add_argument("--json", metavar="OUT", default=None, help="write the report here")
    ap.add_argument(
        "--setup", choices=SETUPS.names(), default="smollm2-135m",
        help="the served model and how Claude Code meets it (see above)",
    )  # fmt: skip
    ap.add_argument("--claude", default=None, help="the claude executable (default: .claude-code)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="bound on each claude run")
    ap.add_argument(
        "--min-cached", type=float, default=0.8, help="share of run 2's prompt tokens cached"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    claude, why = find_claude(args.claude)
    if claude is None:
        print(f"penelope bench claude-code: {why}", file=sys.stderr)
        return MISSING_EXIT
    report = run_bench(claude, args.timeout_s, args.min_cached, SETUPS[args.setup])
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    keys = ("ok", "cache_ok", "exit_codes", "seconds", "second_run_cached_ratio")
    summary = {k: report[k] for k in keys}
    print(json.dumps(summary), file=sys.stderr)
    if not args.json:
        print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
