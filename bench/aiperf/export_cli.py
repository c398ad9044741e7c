"""`penelope bench export-trace`: our agent sessions as aiperf trace files (`bench.aiperf.export`).

    penelope bench export-trace [--regime busy|idle] [--trace FILE] [--seed N] \\
        [--out-dir aiperf-trace] [--analyze]

Writes OUT_DIR/sessions.jsonl (aiperf's multi-turn shape: replay it with
`aiperf profile --custom-dataset-type mooncake_trace --input-file ...`),
OUT_DIR/requests.jsonl (one row per request, whole-prompt hash ids: for
`aiperf analyze-trace`) and OUT_DIR/export.json: the workload's options, our
statistics (sessions, requests, prompt tokens, unbounded-cache hit rate) and,
with --analyze, aiperf analyze-trace's own figures on requests.jsonl beside them.
The workload options are `penelope bench versus`'s, with its defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from bench.aiperf.export import BlockIds, ExportConfig, prefix_stats, request_rows, session_rows
from bench.versus.config import REGIMES, ServerSpec, VersusConfig

ANALYZE_TIMEOUT_S = 300.0
# bench versus's workload options, copied onto the export's parser
_WORKLOAD = ("trace", "sessions", "length_divisor", "time_divisor", "max_gap_s",
             "mean_interarrival_s", "window_tokens", "max_turns", "max_output_tokens")  # fmt: skip
_NO_SERVER = (ServerSpec("export", "http://127.0.0.1:1"),)  # VersusConfig wants one; unused


def add_workload_options(ap: argparse.ArgumentParser) -> None:
    """--regime, bench versus's workload options with its defaults, --seed and --block."""
    d = VersusConfig(_NO_SERVER)
    ap.add_argument(
        "--regime",
        choices=sorted(REGIMES),
        default=None,
        help="bench versus's workload for that regime; options given as well win",
    )
    for name in _WORKLOAD:
        default = getattr(d, name)
        ap.add_argument(
            f"--{name.replace('_', '-')}",
            type=type(default),
            default=default,
            help="as in `penelope bench versus`",
        )
    ap.add_argument("--seed", type=int, default=0, help="the workload's seed")
    ap.add_argument("--block", type=int, default=64,
                    help="tokens per hash block (aiperf's --isl-block-size)")  # fmt: skip


def parse_with_regime(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`argv` parsed, a --regime's workload as the defaults of the options it names."""
    regime = ap.parse_known_args(argv)[0].regime
    if regime is not None:
        ap.set_defaults(**REGIMES[regime])
    return ap.parse_args(argv)


def export_config(a: argparse.Namespace, out_dir: Path) -> ExportConfig:
    workload = VersusConfig(_NO_SERVER, regime=a.regime or "",
                            **{k: getattr(a, k) for k in _WORKLOAD})  # fmt: skip
    return ExportConfig(workload, a.seed, a.block, out_dir)


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("penelope bench export-trace", __doc__)
    add_workload_options(ap)
    ap.add_argument("--out-dir", type=Path, default=Path("aiperf-trace"), help="files go here")
    ap.add_argument(
        "--analyze",
        action="store_true",
        help="also run `aiperf analyze-trace` (make aiperf) on requests.jsonl",
    )
    return ap  # fmt: skip


def config_from(argv: list[str] | None) -> tuple[ExportConfig, bool]:
    a = parse_with_regime(build_parser(), argv)
    return export_config(a, a.out_dir), a.analyze


def export(cfg: ExportConfig) -> dict[str, Any]:
    """Write the two trace files and export.json; the document export.json holds."""
    from bench.versus.plan import describe, make_plan

    plan = make_plan(cfg.workload, cfg.seed)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    ids = BlockIds(cfg.block)  # one id space: equal blocks get equal ids in both files
    requests = request_rows(plan, ids)
    files = {"sessions": cfg.out_dir / "sessions.jsonl", "requests": cfg.out_dir / "requests.jsonl"}
    _write(files["sessions"], list(session_rows(plan, ids)))
    _write(files["requests"], requests)
    conf = dataclasses.asdict(cfg.workload)
    conf.pop("servers")
    doc = {
        "bench": "export-trace",
        "files": {k: str(v) for k, v in files.items()},
        "aiperf_flags": f"--custom-dataset-type mooncake_trace --isl-block-size {cfg.block}",
        "workload": json.loads(json.dumps(conf, default=str)),
        "seed": cfg.seed,
        "plan": describe(plan),
        "ours": prefix_stats(requests, cfg.block),
    }
    (cfg.out_dir / "export.json").write_text(json.dumps(doc, indent=1))
    return doc


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def analyze(requests: Path, block: int, out: Path) -> dict[str, Any]:
    """aiperf analyze-trace's report on `requests` (written to `out`), read back."""
    from bench.aiperf import env

    env.run_aiperf(["analyze-trace", str(requests), "--block-size", str(block),
                    "--output-file", str(out)], ANALYZE_TIMEOUT_S)  # fmt: skip
    return dict(json.loads(out.read_text()))


def main(argv: list[str] | None = None) -> int:
    cfg, run_analyze = config_from(argv)
    doc = export(cfg)
    ours = doc["ours"]
    print(f"wrote {doc['files']['sessions']} and {doc['files']['requests']}: "
          f"{doc['plan']['sessions']} sessions, {ours['requests']} requests, "
          f"{ours['prompt_tokens']} prompt tokens")  # fmt: skip
    line = f"{'':24}{'cache hit rate':>16}{'cached tokens':>15}"
    print(line + f"\n{'ours (unbounded cache)':24}{ours['cache_hit_rate']:>16.3f}"
          f"{ours['cached_token_share']:>15.3f}")  # fmt: skip
    if run_analyze:
        theirs = analyze(Path(doc["files"]["requests"]), cfg.block, cfg.out_dir / "analysis.json")
        doc["aiperf_analyze_trace"] = theirs
        (cfg.out_dir / "export.json").write_text(json.dumps(doc, indent=1))
        print(f"{'aiperf analyze-trace':24}{theirs['cache_hit_rate']:>16.3f}{'-':>15}")
    print(f"aiperf: {doc['aiperf_flags']} --input-file {doc['files']['sessions']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
