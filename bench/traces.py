"""Agent traces -> `bench.sessions`: `Session`s of `Turn`s, already scaled.

Two formats (data/traces/README.md):

* **Claude Code sessions** (`*.jsonl.gz`, one session per line, 64-token blocks,
  block ids local to the session). Every request starts with the session's
  `system_tokens` of system prompt and `tool_tokens` of tool schemas; those
  leading tokens become its `prefix_blocks` (system, then tools, the engine's
  chat-template order), keyed by the recorded counts: sessions with equal
  `system_tokens` share the system prompt's tokens, sessions with equal
  `tool_tokens` the tool schemas' (see `bench.tokens`); a count of 0 gives no
  block. Request types `n` and `s` are both turns. A `subagent`
  entry becomes a *child session* (id `<parent>/<agent_id>`, its own prefix
  length, its nested requests as turns) that starts `start_delay_s` after the
  parent's turn `after_turn` ends: the delay is the trace's gap between that
  parent request's end (`t + api_time`) and the subagent's start. The parent's
  next turn keeps its own recorded think time, which already spans the
  subagent's run.
* **Mooncake conversation** (`*.jsonl`, 512-token blocks, ids global, no
  sessions). A request whose hash ids start with all the *full* blocks of an
  earlier request (at least `min_blocks` of them, so the one block every
  request shares does not count) continues that request's session; if that
  request was already continued, the newcomer starts a new session (its
  content still shares pages by block id). A turn's think time is the gap
  between the two arrivals: an upper bound, since it includes the earlier
  response's generation. The trace names no system prompt or tools: sessions
  have no prefix blocks and no shared prefix.

Scaling: lengths map each trace block to `Scale.block_tokens(block_size)`
tokens and scale every other length (tail of a partial block, prefix, output)
by the same effective factor; times are multiplied by `Scale.time`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.sessions import SYSTEM, TOOLS, PrefixBlock, Scale, Session, Trace, Turn

# The real traces vendored into the repository (data/traces, Apache-2.0, with their licence).
TRACE_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"
DEFAULT_TRACE = TRACE_DIR / "claude_code_sessions.jsonl.gz"
MOONCAKE_TRACE = TRACE_DIR / "mooncake_conversation_trace.jsonl"
CLAUDE_BLOCK = 64
MOONCAKE_BLOCK = 512
UNSCALED = Scale()  # trace lengths and times as recorded


# -- Claude Code ---------------------------------------------------------------------


def runs_of(ids: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Run-length encoding of consecutive ids: [5, 6, 7, 2] -> ((5, 3), (2, 1))."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return tuple((s, n) for s, n in runs)


def _claude_turn(r: dict[str, Any], think: float, prefix: int, scale: Scale) -> Turn:
    """One request as a turn; `prefix` is the session's prefix blocks' length, scaled."""
    runs = tuple((int(s), int(n)) for s, n in r["hash_runs"] if n > 0)
    n_blocks = sum(n for _, n in runs)
    tail = max(0, r["in"] - n_blocks * CLAUDE_BLOCK)
    bt = scale.block_tokens(CLAUDE_BLOCK)
    n_in = max(1, n_blocks * bt + scale.tokens(tail, CLAUDE_BLOCK))
    return Turn(
        think_time_s=think * scale.time,
        offset_s=r["t"] * scale.time,
        block_runs=runs,
        input_tokens=n_in,
        output_tokens=max(1, scale.tokens(r["out"], CLAUDE_BLOCK)),
        stop_reason=r.get("stop") or "",
        shared_prefix_tokens=min(n_in, prefix),
    )


def _prefix_blocks(d: dict[str, Any], scale: Scale) -> tuple[PrefixBlock, ...]:
    """The system prompt, then the tool schemas, each keyed by its recorded token count."""
    blocks = (
        PrefixBlock(kind, str(d[field]), scale.tokens(d[field], CLAUDE_BLOCK))
        for kind, field in ((SYSTEM, "system_tokens"), (TOOLS, "tool_tokens"))
    )
    return tuple(b for b in blocks if b.tokens > 0)


def _end(r: dict[str, Any]) -> float:
    return float(r["t"]) + float(r.get("api_time") or 0.0)


def _claude_sessions(
    sid: str, scope: str, d: dict[str, Any], scale: Scale, parent: tuple[str, int, float] | None
) -> list[Session]:
    """The session `sid` (and its subagents after it) from one trace object."""
    blocks = _prefix_blocks(d, scale)
    prefix = sum(b.tokens for b in blocks)  # scaled
    turns: list[Turn] = []
    children: list[Session] = []
    prev: dict[str, Any] | None = None
    for r in d["requests"]:
        if r["type"] == "subagent":
            delay = r["t"] - (_end(prev) if prev else 0.0)
            where = (sid, len(turns) - 1, max(0.0, delay) * scale.time)
            children += _claude_sessions(f"{sid}/{r['agent_id']}", scope, r, scale, where)
            continue
        think = r.get("think_time")
        if think is None:
            think = max(0.0, r["t"] - _end(prev)) if prev else 0.0
        turns.append(_claude_turn(r, 0.0 if prev is None else float(think), prefix, scale))
        prev = r
    if not turns:
        return children
    parent_id, after, delay = parent if parent else (None, -1, 0.0)
    own = Session(
        sid,
        tuple(turns),
        scale.block_tokens(CLAUDE_BLOCK),
        scope,
        parent_id,
        after,
        delay,
        prefix_blocks=blocks,
    )
    return [own, *children]


def load_claude_code(path: str | Path, scale: Scale = UNSCALED, limit: int | None = None) -> Trace:
    """Sessions of a Claude Code trace; `limit` keeps the first N top-level sessions."""
    sessions: list[Session] = []
    with gzip.open(path, "rt") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            d = json.loads(line)
            if d.get("block_size", CLAUDE_BLOCK) != CLAUDE_BLOCK:
                raise ValueError(
                    f"{path}: expected {CLAUDE_BLOCK}-token blocks, got {d.get('block_size')}"
                )
            sessions += _claude_sessions(d["id"], d["id"], d, scale, None)
    return Trace("claude_code", tuple(sessions), scale, CLAUDE_BLOCK)


# -- Mooncake ---------------------------------------------------------------------------


def _full_blocks(r: dict[str, Any]) -> tuple[int, ...]:
    ids = r["hash_ids"]
    return tuple(ids if r["input_length"] % MOONCAKE_BLOCK == 0 else ids[:-1])


def _mooncake_chains(reqs: Sequence[dict[str, Any]], min_blocks: int) -> list[list[int]]:
    """Request indices grouped into sessions by the continuation rule (module doc)."""
    tail_of: dict[tuple[int, ...], int] = {}  # full blocks of a session's last request -> chain
    chains: list[list[int]] = []
    for i, r in enumerate(reqs):
        ids = tuple(r["hash_ids"])
        chain = None
        for k in range(len(ids), min_blocks - 1, -1):
            chain = tail_of.pop(ids[:k], None)
            if chain is not None:
                break
        if chain is None:
            chain = len(chains)
            chains.append([])
        chains[chain].append(i)
        full = _full_blocks(r)
        if len(full) >= min_blocks:
            tail_of[full] = chain
    return chains


def _mooncake_turn(r: dict[str, Any], think_s: float, offset_s: float, scale: Scale) -> Turn:
    n_full, tail = divmod(r["input_length"], MOONCAKE_BLOCK)
    n_in = max(1, n_full * scale.block_tokens(MOONCAKE_BLOCK) + scale.tokens(tail, MOONCAKE_BLOCK))
    return Turn(
        think_time_s=think_s * scale.time,
        offset_s=offset_s * scale.time,
        block_runs=runs_of(r["hash_ids"]),
        input_tokens=n_in,
        output_tokens=max(1, scale.tokens(r["output_length"], MOONCAKE_BLOCK)),
        stop_reason="",
        shared_prefix_tokens=0,
    )


def load_mooncake(
    path: str | Path, scale: Scale = UNSCALED, limit: int | None = None, min_blocks: int = 2
) -> Trace:
    """Sessions of a Mooncake trace; `limit` reads only the first N requests."""
    with open(path) as f:
        reqs = [json.loads(line) for i, line in enumerate(f) if limit is None or i < limit]
    sessions = []
    for chain in _mooncake_chains(reqs, min_blocks):
        t0 = reqs[chain[0]]["timestamp"] / 1000.0
        turns, prev = [], t0
        for i in chain:
            t = reqs[i]["timestamp"] / 1000.0
            turns.append(_mooncake_turn(reqs[i], t - prev, t - t0, scale))
            prev = t
        sessions.append(
            Session(
                f"mooncake-{chain[0]}",
                tuple(turns),
                scale.block_tokens(MOONCAKE_BLOCK),
                "mooncake",
                trace_start_s=t0 * scale.time,
            )
        )
    return Trace("mooncake", tuple(sessions), scale, MOONCAKE_BLOCK)


# -- either format ------------------------------------------------------------------------


def _first_record(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        lines: Iterator[str] = iter(f)
        return json.loads(next(lines))


def load_trace(path: str | Path, scale: Scale = UNSCALED, limit: int | None = None) -> Trace:
    """Load either format, recognised by its first record."""
    p = Path(path)
    first = _first_record(p)
    if "requests" in first:
        if p.suffix != ".gz":
            raise ValueError(f"{p}: Claude Code traces are read as .jsonl.gz")
        return load_claude_code(p, scale, limit)
    if "hash_ids" in first and "timestamp" in first:
        return load_mooncake(p, scale, limit)
    raise ValueError(
        f"{p}: neither a Claude Code session trace (records with 'requests') nor "
        f"a Mooncake trace (records with 'timestamp' and 'hash_ids')"
    )
