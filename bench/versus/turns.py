"""What each server did with every returning turn, and why Penelope's missed.

A returning turn is a session's turn after its first. It is *warm* on a server
when at least `WARM_SHARE` of its prompt was served from that server's cache
(`cached_tokens / prompt_tokens`, the servers' own usage). Per run: first and
returning turns' mean TTFT (a first turn waits behind returning ones where the
queue favours them: the starvation check), the warm count, and the computed
tokens of returning turns by the miss ledger's cause (`usage.penelope.miss_tokens`:
Penelope's servers only). Per server against the baseline, turn by turn on the
same seed and capacity: warm on both, on this server only, on the baseline only,
on neither.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

WARM_SHARE = 0.8


def _warm(rec: dict[str, Any]) -> bool:
    return rec["prompt_tokens"] > 0 and rec["cached_tokens"] >= WARM_SHARE * rec["prompt_tokens"]


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def turn_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One run's first and returning turns: TTFT, warm count, misses by cause."""
    ok = [r for r in records if not r["error"]]
    first = [r for r in ok if r["turn"] == 0]
    back = [r for r in ok if r["turn"] > 0]
    misses: Counter[str] = Counter()
    for r in back:
        misses.update(r.get("miss_tokens") or {})
    return {
        "first_turns": len(first),
        "first_mean_ttft_s": _mean([r["ttft_s"] for r in first]),
        "returning_turns": len(back),
        "returning_mean_ttft_s": _mean([r["ttft_s"] for r in back]),
        "returning_warm": sum(map(_warm, back)),
        "returning_cached_share": sum(r["cached_tokens"] for r in back)
        / max(1, sum(r["prompt_tokens"] for r in back)),
        "returning_miss_tokens": dict(misses),
    }


def versus_turns(runs: Sequence[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per (capacity, seed, server other than the baseline): returning turns warm on both,
    on this server only, on the baseline only, on neither, matched by (session, turn)."""

    def key(r: dict[str, Any]) -> tuple[Any, Any, Any]:
        return (r["kv_tokens"], r.get("load"), r["seed"])

    base = {key(r): r for r in runs if r["server"] == baseline}
    out = []
    for r in runs:
        b = base.get(key(r))
        if r["server"] == baseline or b is None:
            continue
        theirs = {(q["session"], q["turn"]): _warm(q) for q in b["records"] if not q["error"]}
        tally: Counter[str] = Counter()
        for q in r["records"]:
            k = (q["session"], q["turn"])
            if q["error"] or q["turn"] == 0 or k not in theirs:
                continue
            ours = _warm(q)
            tally[("both" if theirs[k] else "ours_only") if ours else
                  ("theirs_only" if theirs[k] else "neither")] += 1  # fmt: skip
        counts = {c: tally[c] for c in ("both", "ours_only", "theirs_only", "neither")}
        out.append({"server": r["server"], "baseline": baseline, "kv_tokens": r["kv_tokens"],
                    "load": r.get("load"), "seed": r["seed"], **counts})  # fmt: skip
    return out


def turns_table(runs: Sequence[dict[str, Any]], pairs: Sequence[dict[str, Any]]) -> str:
    """Per run: first / returning TTFT, warm returning turns, the top miss causes; then the
    turn-by-turn tally against the baseline."""
    lines = [f"{'kv':>6} {'seed':>4} {'server':<14} {'first TTFT':>10} {'returning':>9} "
             f"{'warm':>9}  returning turns' computed tokens by cause"]  # fmt: skip
    for r in sorted(runs, key=lambda r: (r["kv_tokens"] or 0, r.get("load") or 0, r["seed"],
                                         r["server"])):  # fmt: skip
        t = r["turns"]

        def num(v: float | None) -> str:
            return f"{v:.2f}" if v is not None else "-"

        causes = sorted(t["returning_miss_tokens"].items(), key=lambda kv: -kv[1])
        top = ", ".join(f"{c} {n}" for c, n in causes if n) or "-"
        lines.append(
            f"{r['kv_tokens'] or '-':>6} {r['seed']:>4} {r['server']:<14} "
            f"{num(t['first_mean_ttft_s']):>10} {num(t['returning_mean_ttft_s']):>9} "
            f"{t['returning_warm']:>4}/{t['returning_turns']:<4}  {top}"
        )
    for p in pairs:
        lines.append(
            f"kv {p['kv_tokens']} seed {p['seed']}: returning turns warm on both {p['both']}, "
            f"{p['server']} only {p['ours_only']}, {p['baseline']} only {p['theirs_only']}, "
            f"neither {p['neither']}"
        )
    return "\n".join(lines)
