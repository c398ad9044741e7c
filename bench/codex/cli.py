"""`penelope bench codex`: the Codex CLI against `penelope serve`, twice, one session.

    penelope bench codex [--json OUT] [--codex PATH] [--timeout-s 600]

Starts `penelope serve` with the bundled SmolLM2-135M, greedy (real weights: it ends its
turns) on 127.0.0.1, puts a recording proxy in front of it
(`bench.agent_cli`), and runs `codex exec PROMPT` and then
`codex exec resume --last PROMPT` in one scratch git repository, with a
temporary `CODEX_HOME` whose `config.toml` names Penelope as the model provider
(`wire_api = "responses"`, `supports_websockets = false`, the catalogue at
`/v1/models`) and turns off, with Codex's own settings, what a small model's
8K window cannot hold (web search, sub-agents, goals, apps, plugins, image
generation; `codex_config`). The base instructions are the short ones in the
server's catalogue entry (`deployments.api.responses_api.catalogue`).

The JSON and its verdicts are `bench.agent_cli.report`'s (`/v1/responses` requests);
a clean run here also has Codex finding the model's metadata and no request in error.
Codex comes from npm, pinned (`CODEX_VERSION`), into `.codex-cli/` (`make codex`);
without it, exit 2.
"""

from __future__ import annotations

import os
import subprocess
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

if TYPE_CHECKING:
    import argparse

    from bench.agent_cli.proxy import Seen

CODEX_VERSION = "0.171.0"
INSTALL = Install("Codex", "codex", "@openai/codex", CODEX_VERSION, ".codex-cli", "codex")
# Two sessions' worth of the 8K window, and no store: a run starts cold. Codex sends no
# temperature: served greedily, a run repeats, and the small model does not ramble past
# the server's output cap (Codex exits 1 on an incomplete response).
MODEL = "smollm2-135m"
SERVE = serve_options(MODEL, 1024, 0.0)
PROMPTS = ("Say hello to the user in one short sentence.", "Now say goodbye in one sentence.")
METADATA_WARNING = "Model metadata for"
FEATURES_OFF = ("goals", "multi_agent", "apps", "plugins", "image_generation", "skill_search",
                "shell_snapshot", "sleep_tool", "hooks", "browser_use", "computer_use")  # fmt: skip
find_codex = INSTALL.find


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


def run_bench(codex: str, timeout_s: float, min_cached: float) -> dict[str, Any]:
    def start(url: str, tmp: Path) -> Turn:
        home, work = scratch(tmp, "Codex")
        (home / ".codex").mkdir()
        (home / ".codex" / "config.toml").write_text(codex_config(url))
        env = codex_env(home)
        for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "scratch"]):
            subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)
        return lambda i, prompt: _run(codex, i, prompt, work, env, timeout_s, tmp)

    session = run_session(SERVE, PROMPTS, start, timeout_s, frozenset({"/v1/responses"}))
    runs = session.runs
    clean = (
        all(r["exit_code"] == 0 and r["reply_printed"] for r in runs)
        and not any(r["metadata_warning"] for r in runs)
        and all(s.error is None for s in session.log)
    )
    head = {"codex_version": CODEX_VERSION, "model": MODEL}
    return cache_report(session, min_cached, clean, head, _counts, renderer, _summary)


def _counts(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of a Responses reply's usage."""
    details = usage.get("input_tokens_details") or {}
    return int(usage.get("input_tokens", 0)), int(details.get("cached_tokens", 0))


def _run(codex: str, i: int, prompt: str, work: Path, env: dict[str, str], timeout_s: float,
         tmp: Path) -> dict[str, Any]:  # fmt: skip
    """One `codex exec`: its exit code, its last message (`-o`) and whether it printed it."""
    last = tmp / f"reply-{i}.txt"
    args = [codex, "exec", *(["resume", "--last"] if i else []), "-o", str(last), prompt]
    code, out, err, seconds = run_cli(args, work, env, timeout_s)
    reply = last.read_text().strip() if last.exists() else ""
    return {
        "exit_code": code,
        "seconds": seconds,
        "reply": reply,
        "reply_printed": bool(reply) and reply in out,
        "metadata_warning": METADATA_WARNING in out + err,
        "output_tail": (out + err)[-600:],
    }


def _summary(s: Seen) -> dict[str, Any]:
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


def renderer() -> Render:
    """A `/v1/responses` body -> the prompt's token ids, as the server renders it."""
    from deployments.api.prepare import render_chat
    from deployments.api.responses_api.schemas import ResponsesRequest
    from deployments.api.responses_api.translate import to_chat
    from deployments.api.settings import ApiSettings
    from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
    from penelope_engine.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(converted_dir(find_smollm2_gguf()))

    def prompt(body: dict[str, Any]) -> list[int]:
        request = ResponsesRequest.model_validate(body)
        return render_chat(to_chat(request, [], "s"), tokenizer, ApiSettings())[0]

    return prompt


def build_parser() -> argparse.ArgumentParser:
    return cli_parser("codex", __doc__, INSTALL)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return cli_main(
        "codex", INSTALL, args, lambda codex: run_bench(codex, args.timeout_s, args.min_cached)
    )


if __name__ == "__main__":
    raise SystemExit(main())
