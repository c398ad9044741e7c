"""`penelope bench claude-code`: the Claude Code CLI against `penelope serve`, twice, one session.

    penelope bench claude-code [--json OUT] [--setup NAME] [--claude PATH] [--timeout-s 600]

Starts `penelope serve` with the set-up's model on 127.0.0.1, puts a recording
proxy in front of it (`bench.agent_cli`), and runs `claude -p PROMPT` and then
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

The JSON and its verdicts are `bench.agent_cli.report`'s (`/v1/messages` requests);
a clean run here also has no unknown-model warning. Claude Code comes from npm, pinned
(`CLAUDE_CODE_VERSION`), into `.claude-code/` (`make claude-code`); without it, exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.agent_cli.harness import (
    DUMMY_KEY,
    Install,
    Turn,
    run_cli,
    run_session,
    scratch,
    serve_options,
)
from bench.agent_cli.report import Render, cache_report, cli_main, cli_parser
from bench.claude_code.setups import SETUPS, Setup

if TYPE_CHECKING:
    import argparse

    from bench.agent_cli.proxy import Seen
    from penelope_engine.tokenizer import Tokenizer

CLAUDE_CODE_VERSION = "2.1.332"
INSTALL = Install("Claude Code", "claude", "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION,
                  ".claude-code", "claude-code")  # fmt: skip
UNKNOWN_MODEL = "doesn't recognize the model"  # Claude Code's warning for a model it lacks
find_claude = INSTALL.find


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


def renderer(tokenizer: Tokenizer) -> Render:
    """A `/v1/messages` body -> the prompt's token ids, as the server renders it."""
    from deployments.api.anthropic.schemas import MessagesRequest
    from deployments.api.anthropic.session import session_of
    from deployments.api.anthropic.translate import to_chat
    from deployments.api.prepare import render_chat
    from deployments.api.settings import ApiSettings

    def prompt(body: dict[str, Any]) -> list[int]:
        request = MessagesRequest.model_validate(body)
        chat = to_chat(request, session_of(request, {})).chat
        return render_chat(chat, tokenizer, ApiSettings())[0]

    return prompt


def run_bench(
    claude: str, timeout_s: float, min_cached: float, setup: Setup = SETUPS["smollm2-135m"]
) -> dict[str, Any]:
    def start(url: str, tmp: Path) -> Turn:
        home, work = scratch(tmp, "Claude Code")
        env = claude_env(url, home, setup)

        def turn(i: int, prompt: str) -> dict[str, Any]:
            args = [claude, "-p", *(["--continue"] if i else []), prompt]
            return _run([*args, "--max-turns", "2", *setup.claude_args], work, env, timeout_s)

        return turn

    options = serve_options(setup.model, setup.device_pages, setup.default_temperature)
    session = run_session(options, setup.prompts, start, timeout_s, frozenset({"/v1/messages"}))
    clean = all(
        r["exit_code"] == 0 and r["reply_printed"] and not r["unknown_model_warning"]
        for r in session.runs
    )
    head = {"claude_code_version": CLAUDE_CODE_VERSION, "model": setup.model}
    return cache_report(
        session, min_cached, clean, head, _counts, lambda: renderer(setup.tokenizer()), _summary
    )


def _run(args: list[str], work: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """One `claude -p`: its exit code, its reply (stdout) and whether it printed one."""
    code, out, err, seconds = run_cli(args, work, env, timeout_s)
    return {
        "exit_code": code,
        "reply": out.strip()[:600],
        "reply_printed": _reply_printed(out),
        "unknown_model_warning": UNKNOWN_MODEL in out + err,
        "seconds": seconds,
        "output_tail": (out + err)[-600:],
    }


def _summary(s: Seen) -> dict[str, Any]:
    b = s.body
    return {
        "path": s.path,
        "status": s.status,
        "session": s.headers.get("x-claude-code-session-id"),
        "model": b.get("model"),
        "stream": bool(b.get("stream")),
        "messages": len(b.get("messages") or ()),
        "tools": len(b.get("tools") or ()),
        "max_tokens": b.get("max_tokens"),
        "usage": s.usage,
        "error": s.error,
    }


def _reply_printed(stdout: str) -> bool:
    """`claude -p` printed a reply: text on stdout that is not its own error line."""
    text = stdout.strip()
    return bool(text) and not text.startswith(("API Error", "Error:"))


def _counts(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a Messages reply's usage."""
    keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return sum(int(usage.get(k, 0)) for k in keys), int(usage.get("cache_read_input_tokens", 0))


def build_parser() -> argparse.ArgumentParser:
    ap = cli_parser("claude-code", __doc__, INSTALL)
    ap.add_argument(
        "--setup", choices=SETUPS.names(), default="smollm2-135m",
        help="the served model and how Claude Code meets it (see above)",
    )  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup = SETUPS[args.setup]
    return cli_main(
        "claude-code", INSTALL, args,
        lambda claude: run_bench(claude, args.timeout_s, args.min_cached, setup),
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
