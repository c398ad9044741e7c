"""Medians over runs, ratios ours/theirs (and ours/each peer), and the printed table."""

from __future__ import annotations

import statistics
from typing import Any

from bench.report import text_table

FIGURES = ("prefill_tok_s", "ttft_2k_s", "decode_b1_tok_s", "decode_b8_tok_s")
LOWER_IS_BETTER = ("ttft_2k_s",)


def figure_keys(batch: int) -> list[str]:
    names = [f.replace("b8", f"b{batch}") for f in FIGURES]
    return [k for name in names for k in (name, f"{name}_per_cpu_s")]


def medians(runs: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Median of every figure over `runs`, and the session's turns median by turn."""
    out: dict[str, Any] = {
        k: round(statistics.median(r[k] for r in runs), 4) for k in figure_keys(batch)
    }
    turns = []
    for i, first in enumerate(runs[0]["session"]):
        rows = [r["session"][i] for r in runs]
        turns.append(
            {
                "turn": first["turn"],
                "prompt_tokens": first["prompt_tokens"],
                **{
                    k: round(statistics.median(row[k] for row in rows), 4)
                    for k in ("ttft_s", "ttft_cpu_s", "cached_tokens")
                },
            }
        )
    out["session"] = turns
    return out


def ratios(ours: dict[str, Any], theirs: dict[str, Any], batch: int) -> dict[str, float]:
    """ours / theirs, inverted for TTFT, so every ratio above 1 means we are ahead."""
    out = {}
    for k in figure_keys(batch):
        a, b = ours[k], theirs[k]
        lower = any(k.startswith(name) for name in LOWER_IS_BETTER)
        num, den = (b, a) if lower else (a, b)
        out[k] = round(num / den, 3) if den else float("nan")
    return out


def table(result: dict[str, Any]) -> str:
    """Our figures beside each other side's, then our ratio to each (above 1: we are ahead)."""
    batch = result["config"]["batch"]
    figures = {"ours": result["ours"]}
    ratio_cols: dict[str, dict[str, float]] = {}
    if result.get("theirs"):
        figures["theirs"] = result["theirs"]
        ratio_cols["ratio"] = result["ratios"]
    for name, peer in (result.get("peers") or {}).items():
        figures[name] = peer
        ratio_cols[f"ours/{name}"] = result["peer_ratios"][name]
    rows = [["figure", *figures, *ratio_cols]]
    for k in figure_keys(batch):
        rows.append(
            [k, *(str(f[k]) for f in figures.values()), *(str(r[k]) for r in ratio_cols.values())]
        )
    for i, turn in enumerate(result["ours"]["session"]):
        row = [f"turn {turn['turn']} ttft_s / cached"]
        for f in figures.values():
            t = f["session"][i]
            row.append(f"{t['ttft_s']} / {t['cached_tokens']}")
        rows.append(row + [""] * len(ratio_cols))
    if result.get("constrained"):
        c = result["constrained"]
        value = f"{c['plain_step_ms']} -> {c['constrained_step_ms']} ms (x{c['ratio']})"
        label = f"decode step b{c['batch']}, free -> grammar"
        rows.append([label, value, *[""] * (len(rows[0]) - 2)])
    return text_table(rows)
