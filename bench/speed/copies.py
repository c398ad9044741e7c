"""KV copies between the tiers as the engine makes them, against what the simulator charges.

    penelope bench copies [--model qwen3-8b] [--hardware h100] [--tokens 1024,4096,16384]
                          [--repeats 5] [--engine] [--out DIR]

Two measurements, each printed as JSON, a table and a plot (`--out`):

- **pools**: `TorchTiers.host_to_device` and `device_to_host` (the calls the cache
  makes on the step thread) over KV pools of the model's real shape (layers, KV
  heads, head dim, bf16 on CUDA), pages scattered over the pool as they are in
  service; the median of `--repeats` after a first call (`first_s`), in GB/s, against the
  simulator's charge for the same bytes (`GpuCostModel.load_time`: PCIe at
  `pcie_bytes_per_s * pcie_eff` plus a per-copy latency). A ratio above 1 means
  the engine's copy takes longer than the simulator says.
- **engine** (`--engine`): the real `Engine` with the model's shape and
  random weights. One session's history is prefilled, pushed to the host by
  another session's prompt, then the session returns with a short new turn; the
  same return with a device pool that kept everything is the control. The
  difference in TTFT is what the loads cost that step, set beside its forward.

On a CPU (no CUDA) the pools run on the CPU at the tiny model's shape: the
copy path is exercised, the GB/s are the CPU's, and the comparison with the
GPU roofline is meaningless (the JSON says so); so is `--engine`'s, which runs
the tiny model in float32 there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.report import pyplot, save_figure, text_table
from bench.sampler import cpu_fields
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.speed.shapes import device_and_dtype, random_loaded
from penelope_engine.cache.tier import Tier
from penelope_engine.config import ModelConfig
from penelope_engine.model.tiny import tiny_qwen3_config
from penelope_engine.tiers.copies import TorchTiers
from penelope_engine.tiers.kv_pool import KVPool

PAGE = 16


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Any, repeats: int) -> tuple[float, float]:
    """Seconds of the first `fn()` (cold), and the median of `repeats` runs after it."""
    out = []
    for _ in range(repeats + 1):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out[0], statistics.median(out[1:])


def pools(model: ModelConfig, cost: GpuCostModel, tokens: list[int], repeats: int) -> list[dict]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    pages = max(tokens) // PAGE
    dev = KVPool(model, 2 * pages, PAGE, dtype, device)
    host = KVPool(model, 2 * pages, PAGE, dtype, "cpu", pin_memory=True)
    tiers = TorchTiers(dev, host)
    rng = np.random.default_rng(0)
    rows = []
    for n_tok in tokens:
        n = n_tok // PAGE
        hp, dp = rng.permutation(2 * pages)[:n], rng.permutation(2 * pages)[:n]
        nbytes = n * dev.bytes_per_page
        charged = cost.load_time(n * PAGE, Tier.HOST)
        for name, fn in (
            ("host_to_device", partial(tiers.host_to_device, hp, dp)),
            ("device_to_host", partial(tiers.device_to_host, dp, hp)),
        ):
            first, s = timed(fn, repeats)
            rows.append(
                {
                    "copy": name,
                    "tokens": n * PAGE,
                    "bytes": nbytes,
                    "seconds": s,
                    "first_s": first,
                    "gb_per_s": nbytes / s / 1e9,
                    "simulator_s": charged,
                    "measured_over_simulator": s / charged,
                }
            )
    return rows


class LoadTimes:
    """A copy observer (`BenchHooks.on_copy`) that records each load's seconds."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, tier: Tier, nbytes: int, seconds: float) -> None:
        self.seconds.append(seconds)


def returning(engine: Any, loads: LoadTimes, req: Any) -> dict[str, Any]:
    """One returning turn to its end (`max_tokens` 1): its wall time, usage and loads."""
    loads.seconds.clear()
    sync()
    t0 = time.perf_counter()
    u = engine.generate_sync(req).usage
    sync()
    return {
        "ttft_s": time.perf_counter() - t0,
        "device_tokens": u.device_tokens,
        "host_tokens": u.host_tokens,
        "recomputed_tokens": u.recomputed_tokens,
        "new_tokens": u.new_tokens,
        "load_s": sum(loads.seconds),
    }


def engine_return(model: ModelConfig, cost: GpuCostModel, history: int, new: int) -> dict:
    """TTFT of a returning turn whose history is on the host, and with it on the device."""
    from penelope_engine.config import CacheConfig, EngineConfig
    from penelope_engine.core import BenchHooks
    from penelope_engine.engine import Engine
    from penelope_engine.protocol import GenerateRequest, SamplingParams

    device, dtype = device_and_dtype()
    cuda = device == "cuda"
    loaded = random_loaded(model, device, dtype)
    rng = np.random.default_rng(1)

    def prompt(n: int) -> tuple[int, ...]:
        return tuple(int(t) for t in rng.integers(3, 150_000, n))

    a, b, turn = prompt(history), prompt(history), prompt(new)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    out: dict[str, Any] = {"history_tokens": history, "new_tokens": new}
    for label, device_pages in (("host", history // PAGE + 32), ("device", 4 * history // PAGE)):
        cache = CacheConfig(PAGE, device_pages, 4 * history // PAGE, "penelope")
        loads = LoadTimes()
        config = EngineConfig(device=device, dtype=dtype, cache=cache)
        engine = Engine(config, loaded=loaded, bench=BenchHooks(on_copy=loads))
        engine.generate_sync(GenerateRequest("warm", prompt(64), one, "w"))
        engine.generate_sync(GenerateRequest("a0", a, one, "a"))
        engine.generate_sync(GenerateRequest("b0", b, one, "b"))  # pushes a's pages out (host)
        # a returns (its first load in this engine), then b (the second: a warm one)
        out[label] = returning(engine, loads, GenerateRequest("a1", a + turn, one, "a"))
        out[label]["again"] = returning(engine, loads, GenerateRequest("b1", b + turn, one, "b"))
        engine.check_integrity()
        del engine
        if cuda:
            torch.cuda.empty_cache()
    host_tok = out["host"]["host_tokens"]
    out["stall_s"] = out["host"]["ttft_s"] - out["device"]["ttft_s"]
    out["simulator_load_s"] = cost.load_time(host_tok, Tier.HOST) if host_tok else 0.0
    return out


def report(result: dict, out: Path | None) -> None:
    rows = [["copy", "tokens", "MB", "ms", "GB/s", "simulator ms", "measured / simulator"]]
    for r in result["pools"]:
        rows.append(
            [
                r["copy"],
                str(r["tokens"]),
                f"{r['bytes'] / 1e6:.0f}",
                f"{r['seconds'] * 1e3:.2f}",
                f"{r['gb_per_s']:.1f}",
                f"{r['simulator_s'] * 1e3:.2f}",
                f"{r['measured_over_simulator']:.2f}x",
            ]
        )
    print(text_table(rows, right_from=1))
    if "engine" in result:
        e = result["engine"]
        print(
            f"engine: return of {e['history_tokens']} + {e['new_tokens']} tokens: TTFT "
            f"{e['host']['ttft_s'] * 1e3:.1f} ms from the host ({e['host']['host_tokens']} "
            f"tokens loaded in {e['host']['load_s'] * 1e3:.1f} ms) vs "
            f"{e['device']['ttft_s'] * 1e3:.1f} ms on the device; simulator's load "
            f"{e['simulator_load_s'] * 1e3:.1f} ms"
        )
    if out is None:
        return
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in ("host_to_device", "device_to_host"):
        rs = [r for r in result["pools"] if r["copy"] == name]
        ax.plot([r["tokens"] for r in rs], [r["gb_per_s"] for r in rs], "o-", label=name)
    ax.axhline(result["simulator_gb_per_s"], ls="--", c="k", label="simulator's PCIe rate")
    ax.set_xscale("log")
    ax.set_xlabel("tokens copied")
    ax.set_ylabel("GB/s")
    ax.set_title(f"{result['model']} KV copies on {result['device']}")
    ax.legend()
    save_figure(fig, out / "copies.png")
    (out / "copies.json").write_text(json.dumps(result, indent=1))


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("penelope bench copies", __doc__)
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(QWEN3), help="KV shape (CUDA)")
    ap.add_argument("--hardware", default="h100", choices=sorted(HARDWARE), help="the charge's")
    ap.add_argument("--tokens", default="1024,4096,16384", help="tokens per copy, a comma list")
    ap.add_argument("--repeats", type=int, default=5, help="timed copies after the first")
    ap.add_argument("--engine", action="store_true", help="also the real engine's returns")
    ap.add_argument("--engine-history", type=int, default=8192, help="tokens of a history")
    ap.add_argument("--label", default="", help="a name for this run in the JSON")
    ap.add_argument("--out", type=Path, default=None, help="folder for copies.json and .png")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    model = QWEN3[args.model] if cuda else tiny_qwen3_config()
    cost = GpuCostModel(QWEN3[args.model], HARDWARE[args.hardware])
    tokens = [int(t) for t in args.tokens.split(",")]
    result: dict[str, Any] = {
        "label": args.label,
        "device": torch.cuda.get_device_name() if cuda else cpu_fields().get("model name", "cpu"),
        "model": model.name,
        "torch": torch.__version__,
        "simulator_gb_per_s": cost.hw.pcie_bytes_per_s * cost.hw.pcie_eff / 1e9,
        "roofline_meaningful": cuda,
        "pools": pools(model, cost, tokens, args.repeats),
    }
    if args.engine:
        result["engine"] = engine_return(model, cost, args.engine_history, 256)
    print(json.dumps(result))
    report(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
