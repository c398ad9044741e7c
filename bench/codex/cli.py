"""`penelope bench codex`: the Codex CLI against `penelope serve`, twice, one session.

    penelope bench codex [--json OUT] [--codex PATH] [--timeout-s 600]

Starts `penelope serve` with the bundled SmolLM2-135M, greedy (real weights: it ends its
turns) on 127.0.0.1, puts a recording proxy in front of it
(`bench.claude_code.proxy`), and runs `codex exec PROMPT` and then
`codex exec resume --last PROMPT` in one scratch git repository, with a
temporary `CODEX_HOME` whose `config.toml` names Penelope as the model provider
(`wire_api = "responses"`, `supports_websockets = false`, the catalogue at
`/v1/models`) and turns off, with Codex's own settings, what a small model's
8K window cannot hold (web search, sub-agents, goals, apps, plugins, image
generation; `codex_config`). The base instructions are the short ones in the
server's catalogue entry (`deployments.api.responses_api.catalogue`).

The JSON: `ok`, `requests` (each `/v1/responses` request as the server saw it),
`exit_codes`, each run's `reply`, and per request `prompt_tokens`,
`cached_tokens` and `shared_prefix_tokens` (the longest token prefix it shares
with an earlier request's prompt: what a cache could serve). `ok` means both
runs exited 0 and printed the model's reply, every request was answered 200,
Codex found the model's metadata, and the second run's requests were served
mostly from cache (cached >= `--min-cached` of their prompt tokens).

Codex comes from npm, pinned (`CODEX_VERSION`), installed into `.codex-cli/`
(git-ignored): `npm install --prefix .codex-cli @openai/codex@VERSION`
(`make codex`). Without node or that package this says so and exits 2.
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
from typing import Any

from bench.child import server_process
from bench.net import free_port
from bench.tokens import shared_prefixes as common_prefixes

CODEX_VERSION = "0.171.0"
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".codex-cli"
MODEL = "smollm2-135m"
PROMPTS = ("Say hello to the user in one short sentence.", "Now say goodbye in one sentence.")
DUMMY_KEY = "sk-penelope-bench-dummy"
MISSING_EXIT = 2
METADATA_WARNING = "Model metadata for"
FEATURES_OFF = ("goals", "multi_agent", "apps", "plugins", "image_generation", "skill_search",
                "shell_snapshot", "sleep_tool", "hooks", "browser_use", "computer_use")  # fmt: skip


def find_codex(explicit: str | None = None) -> tuple[str | None, str]:
    """The `codex` executable, or None and why not."""
    if explicit:
        return (explicit, "") if Path(explicit).is_file() else (None, f"{explicit} not found")
    if shutil.which("node") is None:
        return None, "node is not on PATH (the Codex CLI installs and runs through it)"
    found = INSTALL_DIR / "node_modules" / ".bin" / "codex"
    if not found.exists():
        return None, (
            f"Codex is not installed in {INSTALL_DIR}: run `make codex` (npm install --prefix "
            f".codex-cli @openai/codex@{CODEX_VERSION}) in the repository"
        )
    return str(found), ""


def codex_config(base_url: str) -> str:
    """`config.toml`: Penelope as the provider, and what a small window cannot hold off."""
    lines = [
        f'model = "{MODEL}"',
        'model_provider = "penelope"',
        'web_search = "disabled"',
        "include_apps_instructions = false",
        "check_for_update_on_startup = false",
        "",
        "[model_providers.penelope]",
        'name = "Penelope"',
        f'base_url = "{base_url}/v1"',
        'wire_api = "responses"',
        'env_key = "PENELOPE_API_KEY"',
        "supports_websockets = false",
        f'model_catalog_url = "{base_url}/v1/models"',
        "",
        "[features]",
        *(f"{name} = false" for name in FEATURES_OFF),
    ]
    return "\n".join(lines) + "\n"


def codex_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "PENELOPE_API_KEY": DUMMY_KEY,
        "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
        "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
    }  # fmt: skip


def serve_argv(port: int) -> list[str]:
    cmd = [sys.executable, "-m", "penelope_cli.cli", "serve", "--model", MODEL]
    # Two sessions' worth of the 8K window, and no store: a run starts cold. Codex sends no
    # temperature: served greedily, a run repeats, and the small model does not ramble past
    # the server's output cap (Codex exits 1 on an incomplete response).
    cmd += ["--device-pages", "1024", "--store-uri", "none", "--default-temperature", "0"]
    return cmd + ["--port", str(port), "--log-level", "warning"]


def _scratch_repo(work: Path, env: dict[str, str]) -> None:
    work.mkdir()
    (work / "README.md").write_text("A scratch project for the Codex bench.\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "scratch"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)


def _run(codex: str, i: int, prompt: str, work: Path, env: dict[str, str], timeout_s: float,
         tmp: Path) -> dict[str, Any]:  # fmt: skip
    last = tmp / f"reply-{i}.txt"
    args = [codex, "exec", *(["resume", "--last"] if i else []), "-o", str(last), prompt]
    t0 = time.monotonic()
    try:
        done = subprocess.run(args, cwd=work, env=env, capture_output=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)  # fmt: skip
        code, out, err = done.returncode, done.stdout.decode(errors="replace"), done.stderr
    except subprocess.TimeoutExpired:
        code, out, err = 124, "", b"timed out"
    reply = last.read_text().strip() if last.exists() else ""
    text = out + err.decode(errors="replace")
    return {
        "exit_code": code,
        "seconds": round(time.monotonic() - t0, 1),
        "reply": reply,
        "reply_printed": bool(reply) and reply in out,
        "metadata_warning": METADATA_WARNING in text,
        "output_tail": text[-600:],
    }


def run_bench(codex: str, timeout_s: float, min_cached: float) -> dict[str, Any]:
    from bench.claude_code.proxy import Seen, recording_proxy
    from deployments.api.standalone import background_server

    started = time.monotonic()
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    serve_env = dict(
        os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    with tempfile.TemporaryDirectory(prefix="penelope-codex-") as name:
        tmp = Path(name)
        home, work = tmp / "home", tmp / "work"
        (home / ".codex").mkdir(parents=True)
        env = codex_env(home)
        _scratch_repo(work, env)
        log: list[Seen] = []
        runs: list[dict[str, Any]] = []
        base, serve_log = f"http://127.0.0.1:{port}", tmp / "serve.log"
        try:
            with (
                server_process("penelope serve", serve_argv(port), serve_log, f"{base}/health",
                               min(timeout_s, 180.0), env=serve_env, grace_s=30.0),
                background_server(recording_proxy(base, log, paths=frozenset({"/v1/responses"})))
                as url,
            ):  # fmt: skip
                (home / ".codex" / "config.toml").write_text(codex_config(url))
                for i, prompt in enumerate(PROMPTS):
                    first = len(log)
                    run = _run(codex, i, prompt, work, env, timeout_s, tmp)
                    runs.append({**run, "requests": list(range(first, len(log)))})
        finally:
            server_log = serve_log.read_text(errors="replace")[-2000:]
    return _report(log, runs, min_cached, time.monotonic() - started, server_log)


def _report(
    log: list[Any], runs: list[dict[str, Any]], min_cached: float, seconds: float, server_log: str
) -> dict[str, Any]:
    prompt = [int(s.usage.get("input_tokens", 0)) for s in log]
    cached = [int((s.usage.get("input_tokens_details") or {}).get("cached_tokens", 0)) for s in log]
    shared = shared_prefixes([s.body for s in log]) if log else []
    second = runs[1]["requests"] if len(runs) > 1 else []
    second_ratio = sum(cached[i] for i in second) / max(1, sum(prompt[i] for i in second))
    ok = (
        len(runs) == 2
        and all(r["exit_code"] == 0 and r["reply_printed"] and r["requests"] for r in runs)
        and not any(r["metadata_warning"] for r in runs)
        and all(s.status == 200 and s.error is None for s in log)
        and second_ratio >= min_cached
    )
    return {
        "ok": ok,
        "codex_version": CODEX_VERSION,
        "model": MODEL,
        "seconds": round(seconds, 1),
        "exit_codes": [r["exit_code"] for r in runs],
        "runs": runs,
        "requests": [_summary(s) for s in log],
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "shared_prefix_tokens": shared,
        "second_run_cached_ratio": round(second_ratio, 4),
        "min_cached": min_cached,
        "server_log_tail": server_log if not ok else "",
    }


def _summary(s: Any) -> dict[str, Any]:
    b = s.body
    return {
        "path": s.path,
        "status": s.status,
        "session": b.get("prompt_cache_key"),
        "stream": bool(b.get("stream")),
        "store": b.get("store"),
        "input_items": len(b.get("input") or ()),
        "tools": len(b.get("tools") or ()),
        "usage": s.usage,
        "error": s.error,
    }


def shared_prefixes(bodies: list[dict[str, Any]]) -> list[int]:
    """Per request: the longest prompt-token prefix shared with an earlier request's prompt."""
    from deployments.api.prepare import render_chat
    from deployments.api.responses_api.schemas import ResponsesRequest
    from deployments.api.responses_api.translate import to_chat
    from deployments.api.settings import ApiSettings
    from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
    from penelope_engine.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(converted_dir(find_smollm2_gguf()))

    def prompt(body: dict[str, Any]) -> list[int] | None:
        try:
            request = ResponsesRequest.model_validate(body)
            return render_chat(to_chat(request, [], "s"), tokenizer, ApiSettings())[0]
        except Exception:  # noqa: BLE001 (the server refused it too: no prompt to share)
            return None

    return common_prefixes([prompt(b) for b in bodies])


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("penelope bench codex", __doc__)
    ap.add_argument("--json", metavar="OUT", default=None, help="write the report here")
    ap.add_argument("--codex", default=None, help="the codex executable (default: .codex-cli)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="bound on each codex run")
    ap.add_argument(
        "--min-cached", type=float, default=0.8, help="share of run 2's prompt tokens cached"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    codex, why = find_codex(args.codex)
    if codex is None:
        print(f"penelope bench codex: {why}", file=sys.stderr)
        return MISSING_EXIT
    report = run_bench(codex, args.timeout_s, args.min_cached)
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    summary = {k: report[k] for k in ("ok", "exit_codes", "seconds", "second_run_cached_ratio")}
    print(json.dumps(summary), file=sys.stderr)
    if not args.json:
        print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
