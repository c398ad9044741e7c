"""Our agent sessions in aiperf's Mooncake trace format, two ways.

The sessions are exactly those `penelope bench versus` replays (`bench.versus.plan`:
a trace, `--regime` or scale options, a seed), so aiperf and our harness see one
workload. A prompt's hash ids are its *content*: block j of a prompt (`block`
tokens) gets the dense id of the chain (id of block j-1, its token ids), so two
prompts share a hash id exactly where they share every token up to that block's
end, as a radix or paged prefix cache does. A partial last block is never shared.

* **sessions.jsonl**, aiperf's own agentic shape (what `aiperf synthesize
  agentic-code` writes; aiperf's default multi-turn context mode): one aiperf
  session per our session (`session_id`); the first row has `timestamp` (ms, the
  session's start) and the whole first prompt's `hash_ids`; a later row has
  `delay` (ms, the tool gap after the previous answer) and only the turn's *new*
  tokens (`input_length` = prompt - previous prompt - previous output; fresh
  `hash_ids`). aiperf sends the history itself, the live answers threaded in, so a
  returning turn reuses the previous turn's blocks by carrying its whole prompt.
  A turn whose prompt does not start with the previous one (the trace rewrote or
  compacted its context) starts a new aiperf session `<id>@<turn>`, whose first
  prompt still shares hash ids wherever it shares content: aiperf cannot drop
  history mid-session. A turn that grows by less than the previous answer gets one
  new token (aiperf needs a non-empty turn).
* **requests.jsonl**, classic Mooncake: one row per request with the *whole*
  prompt's `hash_ids` (a returning turn's list starts with the previous turn's
  full blocks) and an absolute `timestamp`; no `session_id` (aiperf would otherwise
  accumulate history on top of it). This is the file `aiperf analyze-trace` reads.

Every row carries `extra: {"session_id": ...}`, which aiperf merges into the
request body: Penelope names the session by it (`deployments.api.sessions`);
vLLM and llama-server ignore it.

What has no place in aiperf's format (lost on export):
* the token ids themselves: aiperf synthesises text per hash id with its own corpus,
  so only sharing survives, not content; the server re-tokenises that text, so a
  prompt's length can move by a few tokens at block joins;
* the stand-in answer: `bench versus` sends the trace's own output ids in the next
  prompt, aiperf the live answer (sessions) or synthesised text (requests);
* `max_tokens` is `output_length`, but aiperf does not force the length (no
  `ignore_eos`): an answer may end early;
* sessions.jsonl: which later-turn blocks other sessions share (fresh ids);
  requests.jsonl: the closed loop (a timestamp is the session's start plus the gaps
  before it, not waiting for the answers), and sessions are not grouped;
* subagents (`bench versus` replays none either), the trace's stop reasons, API
  times, per-request model names, and our `Scale` (stated in export.json instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.versus.config import VersusConfig
from bench.versus.plan import Plan, PlannedSession

MS = 1000.0


@dataclass(frozen=True)
class ExportConfig:
    workload: VersusConfig  # the sessions `bench versus` would replay (its servers unused)
    seed: int = 0
    block: int = 64  # tokens per hash block (aiperf's --isl-block-size)
    out_dir: Path = Path("aiperf-trace")

    def __post_init__(self) -> None:
        if self.block < 1:
            raise ValueError(f"block must be >= 1 token, got {self.block}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


class BlockIds:
    """Dense hash ids: one per distinct (previous block's id, block tokens) chain link."""

    def __init__(self, block: int) -> None:
        self.block = block
        self._ids: dict[tuple[int, tuple[int, ...]], int] = {}
        self._next = 0

    def fresh(self, n: int) -> list[int]:
        """`n` ids nothing else has."""
        out = list(range(self._next, self._next + n))
        self._next += n
        return out

    def of(self, prompt: tuple[int, ...]) -> list[int]:
        """`prompt`'s hash ids: full blocks by content (chained), a partial tail fresh."""
        ids: list[int] = []
        prev = -1
        full = len(prompt) // self.block
        for j in range(full):
            key = (prev, prompt[j * self.block : (j + 1) * self.block])
            if key not in self._ids:
                self._ids[key] = self._next
                self._next += 1
            prev = self._ids[key]
            ids.append(prev)
        return ids + (self.fresh(1) if len(prompt) > full * self.block else [])


def _extends(s: PlannedSession, k: int) -> int:
    """Turn k's new tokens past turn k-1's prompt and answer (at least 1: aiperf needs a
    non-empty turn), or 0 when turn k's prompt does not start with turn k-1's."""
    a, b = s.turns[k - 1], s.turns[k]
    if b.prompt[: len(a.prompt)] != a.prompt:
        return 0
    return max(1, len(b.prompt) - len(a.prompt) - a.max_tokens)


def _first_row(sid: str, name: str, at_s: float, prompt: tuple[int, ...], out: int,
               ids: BlockIds) -> dict[str, Any]:  # fmt: skip
    return {"session_id": sid, "timestamp": round(at_s * MS, 1), "input_length": len(prompt),
            "output_length": out, "hash_ids": ids.of(prompt),
            "extra": {"session_id": name}}  # fmt: skip


def session_rows(plan: Plan, ids: BlockIds) -> Iterator[dict[str, Any]]:
    """sessions.jsonl's rows, session by session (module doc)."""
    for s in plan.sessions:
        sid, at = s.id, s.start_s
        yield _first_row(sid, s.id, at, s.turns[0].prompt, s.turns[0].max_tokens, ids)
        for k in range(1, len(s.turns)):
            t = s.turns[k]
            at += t.gap_s
            new = _extends(s, k)
            if not new:
                sid = f"{s.id}@{k}"
                yield _first_row(sid, s.id, at, t.prompt, t.max_tokens, ids)
                continue
            yield {"session_id": sid, "delay": round(t.gap_s * MS, 1), "input_length": new,
                   "output_length": t.max_tokens, "hash_ids": ids.fresh(-(-new // ids.block)),
                   "extra": {"session_id": s.id}}  # fmt: skip


def request_rows(plan: Plan, ids: BlockIds) -> list[dict[str, Any]]:
    """requests.jsonl's rows in time order (module doc)."""
    rows = []
    for s in plan.sessions:
        at = s.start_s
        for t in s.turns:
            at += t.gap_s
            rows.append({"timestamp": round(at * MS, 1), "input_length": len(t.prompt),
                         "output_length": t.max_tokens, "hash_ids": ids.of(t.prompt),
                         "extra": {"session_id": s.id}})  # fmt: skip
    return sorted(rows, key=lambda r: r["timestamp"])


def prefix_stats(rows: list[dict[str, Any]], block: int) -> dict[str, Any]:
    """Our figures for requests.jsonl's rows with an unbounded cache: the mean per-request
    share of leading blocks seen before (what aiperf analyze-trace calls `cache_hit_rate`)
    and the token-weighted share of prompt tokens in such blocks."""
    seen: set[int] = set()
    rates, hit_tokens, prompt_tokens = [], 0, 0
    for r in rows:
        hashes = r["hash_ids"]
        hit = next((i for i, h in enumerate(hashes) if h not in seen), len(hashes))
        rates.append(hit / len(hashes))
        hit_tokens += min(hit * block, r["input_length"])
        prompt_tokens += r["input_length"]
        seen.update(hashes)
    return {
        "requests": len(rows),
        "prompt_tokens": prompt_tokens,
        "block_tokens": block,
        "cache_hit_rate": sum(rates) / len(rates) if rates else 0.0,
        "cached_token_share": hit_tokens / prompt_tokens if prompt_tokens else 0.0,
    }
