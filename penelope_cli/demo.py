"""`penelope demo`: a short agent session on the embedded engine, with a tight cache.

Three sessions share a system prompt and take turns; the device pool is too
small for all of them, so later turns show hits, holes recomputed at their
true positions and, with `--host-pages`, pages loaded back from the host tier.
"""

from __future__ import annotations

import argparse

import torch

from penelope_cli.helpformat import parser
from penelope_engine.config import CacheConfig, EngineConfig
from penelope_engine.engine import Engine
from penelope_engine.protocol import GenerateRequest, SamplingParams

SYSTEM = (
    "You are a careful coding agent. You read files, run tests and explain each change "
    "in one short sentence. Tools: read_file(path), run_tests(), edit(path, diff)."
)
TASKS = [
    "Why does test_parse fail on empty input?",
    "Add a --verbose flag to the CLI.",
    "Rename the config loader and update its callers.",
]
FOLLOW_UPS = [
    "The test output says: AssertionError at line 12. What next?",
    "Done. Summarize the change in one line.",
]


def build_parser() -> argparse.ArgumentParser:
    ap = parser("penelope demo", __doc__)
    ap.add_argument("--model", default="smollm2-135m", help="registered model name or directory")
    ap.add_argument("--policy", default="penelope", help="eviction policy")
    ap.add_argument(
        "--device-pages", type=int, default=20, help="KV pages on the device (16 tokens each)"
    )
    ap.add_argument("--host-pages", type=int, default=64, help="KV pages in host memory")
    ap.add_argument("--max-tokens", type=int, default=24, help="tokens generated per reply")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = EngineConfig(
        model=args.model,
        cache=CacheConfig(
            page_size=16,
            device_pages=args.device_pages,
            host_pages=args.host_pages,
            policy=args.policy,
        ),
    )
    engine = Engine(cfg)
    tok = engine.tokenizer
    chats = {
        i: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": t}]
        for i, t in enumerate(TASKS)
    }
    print(
        f"model {engine.model_name}, policy {args.policy}, device pages {args.device_pages}, "
        f"host pages {args.host_pages}\n"
    )
    print(
        f"{'turn':>4} {'session':>7} {'prompt':>6} {'device':>6} {'host':>5} {'recomp':>6} "
        f"{'new':>5} {'ttft_ms':>8}  reply"
    )
    for turn in range(1 + len(FOLLOW_UPS)):
        for sid, messages in chats.items():
            ids = tok.apply_chat_template(messages, add_generation_prompt=True)
            out = engine.generate_sync(
                GenerateRequest(
                    f"demo-{sid}-{turn}",
                    tuple(ids),
                    SamplingParams(max_tokens=args.max_tokens),
                    session_id=f"agent-{sid}",
                )
            )
            reply = tok.decode(list(out.token_ids)).strip()
            u = out.usage
            print(
                f"{turn:>4} {sid:>7} {u.prompt_tokens:>6} {u.device_tokens:>6} "
                f"{u.host_tokens:>5} {u.recomputed_tokens:>6} {u.new_tokens:>5} "
                f"{(out.ttft_s or 0) * 1e3:>8.0f}  {reply[:50]!r}"
            )
            messages.append({"role": "assistant", "content": reply})
            if turn < len(FOLLOW_UPS):
                messages.append({"role": "user", "content": FOLLOW_UPS[turn]})
            engine.check_integrity()
    s = engine.stats()
    print(
        f"\nhit ratio {s.hit_ratio:.2f}, recompute ratio {s.recompute_ratio:.2f}, "
        f"evictions {list(s.evictions)}"
    )
    return 0
