"""One `aiperf profile` run against one server, and the figures read back from aiperf's JSON.

aiperf replays a Mooncake trace (`bench.aiperf.export`'s sessions.jsonl, or the
sessions `bench.aiperf.synth` has aiperf synthesise) on the chat endpoint,
streamed, on the trace's own schedule (`--fixed-schedule`, shifted to start at
0): a session's first turn at its timestamp, each later turn its delay after the
previous answer, the history re-sent with the live answers. aiperf's stable
per-session id goes in `x-session-id` (`--session-header`), the header Ray
Serve's proxy routes a session by (`make run`); the body's `session_id` from the
export names the trace's session where no header does. `ignore_eos` asks
every server for the trace's output lengths (Penelope, vLLM and llama-server all
take it). The tokenizer is the bundled GGUF's, found offline by name
(`bench.aiperf.tokenizer`). aiperf writes `profile_export_aiperf.json` in the
run's artifact directory; `summary` keeps its figures, in aiperf's own units.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.aiperf import env
from bench.aiperf.tokenizer import hub_cache, hub_env

ENDPOINTS = ("chat", "completions")
EXPORT = "profile_export_aiperf.json"
# (our name, aiperf's metric, its statistic): TTFT, ITL and latency in ms, throughputs per s
FIGURES = (
    ("ttft_avg_ms", "time_to_first_token", "avg"),
    ("ttft_p50_ms", "time_to_first_token", "p50"),
    ("ttft_p90_ms", "time_to_first_token", "p90"),
    ("ttft_p99_ms", "time_to_first_token", "p99"),
    ("itl_avg_ms", "inter_token_latency", "avg"),
    ("itl_p50_ms", "inter_token_latency", "p50"),
    ("latency_avg_ms", "request_latency", "avg"),
    ("latency_p90_ms", "request_latency", "p90"),
    ("output_tok_s", "output_token_throughput", "avg"),
    ("requests_s", "request_throughput", "avg"),
    ("requests", "request_count", "avg"),
    ("prompt_tokens", "usage_prompt_tokens", "sum"),
    ("cached_tokens", "usage_prompt_cache_read_tokens", "sum"),
)


@dataclass(frozen=True)
class ProfileSpec:
    url: str  # the server's base URL
    model: str  # the name the server serves
    input_file: Path  # a Mooncake trace
    block: int  # the trace's tokens per hash id (--isl-block-size)
    artifact_dir: Path  # aiperf's output for this run
    hf_home: Path  # where the tokenizer's hub cache entry is written
    timeout_s: float = 600.0  # the whole aiperf run, start-up and replay
    endpoint: str = "chat"
    streaming: bool = True
    ignore_eos: bool = True

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")) or not self.model:
            raise ValueError(
                f"need an http(s) URL and a model name, got {self.url!r}, {self.model!r}"
            )
        if self.block < 1 or not self.timeout_s > 0:
            raise ValueError(
                f"need block >= 1 and timeout_s > 0, got {self.block}, {self.timeout_s}"
            )
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {self.endpoint!r}")


def profile_args(spec: ProfileSpec, tokenizer: str) -> list[str]:
    """`aiperf profile`'s arguments for `spec` (the command line the report records)."""
    args = ["profile", "--model", spec.model, "--url", spec.url, "--endpoint-type", spec.endpoint,
            "--tokenizer", tokenizer, "--custom-dataset-type", "mooncake_trace",
            "--input-file", str(spec.input_file), "--isl-block-size", str(spec.block),
            "--fixed-schedule", "--fixed-schedule-auto-offset", "--session-header", "x-session-id",
            "--artifact-dir", str(spec.artifact_dir), "--ui-type", "none"]  # fmt: skip
    if spec.streaming:
        args.append("--streaming")
    if spec.ignore_eos:
        args += ["--extra-inputs", "ignore_eos:true"]
    return args


def profile(spec: ProfileSpec) -> dict[str, Any]:
    """Run aiperf as `spec` says; its figures (`summary`) and the command line."""
    args = profile_args(spec, hub_cache(spec.hf_home))
    spec.artifact_dir.mkdir(parents=True, exist_ok=True)
    log = env.run_aiperf(args, spec.timeout_s, hub_env(spec.hf_home))
    (spec.artifact_dir / "aiperf-stdout.txt").write_text(log)
    found = spec.artifact_dir / EXPORT
    if not found.is_file():
        raise RuntimeError(f"aiperf wrote no {EXPORT} in {spec.artifact_dir}; its output:\n"
                           f"{log[-2000:]}")  # fmt: skip
    return {"command": ["aiperf", *args], **summary(json.loads(found.read_text()))}


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures of one `profile_export_aiperf.json`: `FIGURES`, errors, the cached share."""
    out: dict[str, Any] = {"aiperf_version": doc.get("aiperf_version")}
    for name, metric, stat in FIGURES:
        out[name] = (doc.get(metric) or {}).get(stat)
    out["errors"] = sum(int(e.get("count", 1)) for e in doc.get("error_summary") or [])
    out["cancelled"] = bool(doc.get("was_cancelled"))
    prompt, cached = out["prompt_tokens"], out["cached_tokens"]
    out["cached_share"] = cached / prompt if prompt and cached is not None else None
    return out
