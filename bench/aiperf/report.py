"""`penelope bench aiperf`'s table: aiperf's own figures per workload and server, then each
server's ratios to the baseline's on the same workload (below 1: faster than the baseline;
for throughputs, above 1 is better)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.report import text_table

# (column, summary key, format): latencies in ms as aiperf reports them
COLUMNS = (
    ("TTFT avg", "ttft_avg_ms", "{:.0f}"),
    ("p50", "ttft_p50_ms", "{:.0f}"),
    ("p90", "ttft_p90_ms", "{:.0f}"),
    ("p99", "ttft_p99_ms", "{:.0f}"),
    ("ITL avg", "itl_avg_ms", "{:.1f}"),
    ("latency avg", "latency_avg_ms", "{:.0f}"),
    ("out tok/s", "output_tok_s", "{:.2f}"),
    ("req/s", "requests_s", "{:.3f}"),
    ("requests", "requests", "{:.0f}"),
    ("errors", "errors", "{:d}"),
    ("cached", "cached_share", "{:.2f}"),
)
RATIOS = ("ttft_avg_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_avg_ms", "latency_avg_ms",
          "output_tok_s", "requests_s")  # fmt: skip


def _cell(fmt: str, value: Any) -> str:
    return "-" if value is None else fmt.format(value)


def ratios(runs: Sequence[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Per workload and server other than `baseline`: RATIOS' figures over the baseline's."""
    base = {r["workload"]: r for r in runs if r["server"] == baseline}
    out = []
    for r in runs:
        b = base.get(r["workload"])
        if r["server"] == baseline or b is None:
            continue
        out.append({"workload": r["workload"], "server": r["server"], "baseline": baseline,
                    **{k: (r[k] / b[k] if r.get(k) is not None and b.get(k) else None)
                       for k in RATIOS}})  # fmt: skip
    return out


def table(runs: Sequence[dict[str, Any]], rats: Sequence[dict[str, Any]]) -> str:
    """The figures (ms, aiperf's) and, under them, the ratios to the baseline."""
    rows = [["workload", "server", *(c for c, _, _ in COLUMNS)]]
    rows += [[r["workload"], r["server"], *(_cell(f, r.get(k)) for _, k, f in COLUMNS)]
             for r in runs]  # fmt: skip
    text = "aiperf (TTFT, ITL, latency in ms)\n" + text_table(rows, right_from=2)
    if rats:
        head = [["workload", "server / baseline", "TTFT avg", "p90", "p99", "ITL avg",
                 "latency avg", "out tok/s", "req/s"]]  # fmt: skip
        body = [[x["workload"], f"{x['server']} / {x['baseline']}",
                 *(_cell("{:.2f}x", x[k]) for k in RATIOS)] for x in rats]  # fmt: skip
        text += "\n\nratios\n" + text_table(head + body, right_from=2)
    return text
