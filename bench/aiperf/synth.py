"""aiperf's own agentic-coding sessions (`aiperf synthesize agentic-code`), scaled to a 2-core CPU.

aiperf 0.13's default distribution (its `configs/default.json`) models Claude
Code-like sessions for a GPU: a 32K-token shared system/tools prefix, a
per-session context of ~15K (mean), ~6K new tokens and ~1K generated tokens per
turn, 2.5 s agentic and 40 s human gaps, prompts up to 167K tokens, 512-token
blocks. A 135M model on one or two CPU cores serves a few thousand tokens a
second, so `scaled_config` keeps the distributions' *shape* and divides:

* every token figure (new tokens, generation, prefix layers, block size) by
  `length_divisor` (default 32, as `bench versus --regime busy` divides the
  Claude Code trace): a 1K-token shared prefix, ~190 new and ~31 generated tokens
  per turn, 16-token blocks;
* every gap by `time_divisor` (default 4): ~0.6 s agentic, ~10 s human gaps;
* the longest prompt to `max_isl` (default 4,000 tokens, `bench versus`'s window),
  past which aiperf resets a session's context as it does at 167K;

and draws `sessions` sessions (default 16, as the busy regime's). Reset and
cache-layer probabilities stay aiperf's. `max_turns` (0: all) keeps each session's
first turns only, for the CI-sized run. aiperf starts every session at timestamp 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.aiperf import env

TIMEOUT_S = 300.0
_DEFAULT_CONFIG = """
from pathlib import Path
import aiperf.dataset.agentic_code_gen as m
print((Path(m.__file__).parent / "configs" / "default.json").read_text())
"""
_TOKEN_STATS = ("mean", "median", "max")


@dataclass(frozen=True)
class SynthConfig:
    sessions: int = 16
    length_divisor: float = 32.0
    time_divisor: float = 4.0
    max_isl: int = 4000
    max_turns: int = 0  # 0: every turn aiperf synthesised
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sessions < 1 or self.max_isl < 64 or self.max_turns < 0 or self.seed < 0:
            raise ValueError(f"need sessions >= 1, max_isl >= 64, max_turns, seed >= 0: {self}")
        if not (self.length_divisor > 0 and self.time_divisor > 0):
            raise ValueError(f"divisors must be positive, got {self}")


def scaled_config(default: dict[str, Any], cfg: SynthConfig) -> dict[str, Any]:
    """aiperf's distribution config with lengths / length_divisor and gaps / time_divisor."""
    d = json.loads(json.dumps(default))
    s, g = cfg.length_divisor, cfg.time_divisor

    def scale(stats: dict[str, Any], by: float) -> None:
        for k in _TOKEN_STATS:
            if stats.get(k) is not None:
                stats[k] = max(1, round(stats[k] / by))

    scale(d["new_tokens_per_turn"], s)
    scale(d["generation_length"], s)
    scale(d["cache"]["layer2"], s)
    for kind in ("agentic_delay", "human_delay"):
        scale(d["inter_turn_delay"][kind], g)
    if d["inter_turn_delay"].get("max") is not None:
        d["inter_turn_delay"]["max"] = d["inter_turn_delay"]["max"] / g
    for k in ("layer1_tokens", "layer1_5_tokens"):
        d["cache"][k] = round(d["cache"][k] / s)
    d["block_size"] = max(1, round(d["block_size"] / s))
    d["max_prompt_tokens"] = min(cfg.max_isl, round(d["max_prompt_tokens"] / s))
    return d


def synthesize(cfg: SynthConfig, out_dir: Path) -> tuple[Path, int]:
    """aiperf's sessions as OUT_DIR/synth.jsonl (first `max_turns` turns each); the file and
    its block size."""
    default = json.loads(env.run_python(_DEFAULT_CONFIG, [], 60))
    conf = scaled_config(default, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "synth-config.json").write_text(json.dumps(conf, indent=1))
    runs = out_dir / "synth-runs"
    env.run_aiperf(["synthesize", "agentic-code", "--num-sessions", str(cfg.sessions),
                    "--config", str(out_dir / "synth-config.json"), "--output", str(runs),
                    "--seed", str(cfg.seed)], TIMEOUT_S)  # fmt: skip
    made = sorted(runs.glob("*/dataset.jsonl"), key=lambda p: p.stat().st_mtime)
    if not made:
        raise RuntimeError(f"aiperf synthesize wrote no dataset.jsonl under {runs}")
    rows = [json.loads(x) for x in made[-1].read_text().splitlines() if x.strip()]
    kept, seen = [], dict[str, int]()
    for r in rows:
        seen[r["session_id"]] = seen.get(r["session_id"], 0) + 1
        if not cfg.max_turns or seen[r["session_id"]] <= cfg.max_turns:
            kept.append(r)
    path = out_dir / "synth.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    return path, int(conf["block_size"])
