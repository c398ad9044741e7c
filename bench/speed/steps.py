"""The engine's steps against the GPU roofline (issue 49, item 6): `penelope bench steps`.

    penelope bench steps [--model qwen3-8b] [--hardware h100] [--contexts 8192,32768,100000]
                         [--prefill 32768] [--returning 100000] [--hole 20000]
                         [--max-batch 16] [--steps 8] [--cpu-scale 128] [--json OUT]

On CUDA: the real `Engine` with random weights of the model's shape in bfloat16
(`bench.speed.shapes`). Every step is timed whole (`bench.replay.steptimer`:
scheduling, copies, the forward, the commit) and set against
`GpuCostModel.step_time` of that step's own load (`bench.sim.costmodel.step_load`):
`fraction` = roofline seconds / measured seconds, 1.0 at the roofline (the
issue's target is 0.7 on decode and prefill). The cases:

    decode-b1-C, decode-bN-C   one sequence, and the most whose KV fits the device
                               pool's free memory (at most --max-batch), at C tokens
                               of context: the median of --steps decode steps
    prefill-C                  a fresh C-token prompt: its chunks' steps summed (this
                               and the next run twice, the second timed: the first
                               compiles the kernels of their shapes)
    return-C-hole-H            a session of C tokens whose oldest H were evicted
                               returns with 256 new: the steps that recompute the
                               hole and the new tokens, summed

On a CPU: the tiny model with every length divided by --cpu-scale, so the code
path runs in seconds (`make test`); the roofline is a GPU's, and the JSON says
`roofline_meaningful: false`. The attention backend that ran is in the JSON
(`attention`, resolved from --attention: on CUDA `auto` is `flex`, FlexAttention
over the page table, with decode steps replayed as CUDA graphs, `decode_graphs`;
`sdpa` is the reference path over gathered pages, without graphs).
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np
import torch

from bench.replay.steptimer import StepTimer
from bench.sampler import cpu_fields
from bench.sim.costmodel import StepLoad
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel
from bench.speed.shapes import device_and_dtype, random_loaded
from penelope_engine.config import CacheConfig, EngineConfig, ModelConfig
from penelope_engine.engine import Engine
from penelope_engine.model.backends import ATTENTION_BACKENDS, resolve_backend
from penelope_engine.model.registry import LoadedModel
from penelope_engine.model.tiny import tiny_qwen3_config
from penelope_engine.parts import uses_decode_graphs
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.shipped import shipped_scheduler

PAGE = 16
NEW_TOKENS = 256  # a returning turn's new tokens
KV_SHARE = 0.8  # of the device's free memory, for the pool (CUDA)
CPU_BATCH = 4  # the largest decode batch on a CPU


class Bench:
    """One model, one roofline; an engine per case, sized to it."""

    def __init__(self, model: ModelConfig, loaded: LoadedModel, cost: GpuCostModel,
                 device: str, dtype: str, steps: int, attention: str = "auto") -> None:  # fmt: skip
        self.model, self.loaded, self.cost = model, loaded, cost
        self.device, self.dtype, self.steps = device, dtype, steps
        self.attention = attention
        self.rng = np.random.default_rng(1)

    def prompt(self, n: int) -> tuple[int, ...]:
        return tuple(int(t) for t in self.rng.integers(3, self.model.vocab_size - 1, n))

    def timer(self, device_pages: int) -> StepTimer:
        cache = CacheConfig(PAGE, device_pages, 0, "penelope")
        config = EngineConfig(
            device=self.device, dtype=self.dtype, cache=cache,  # type: ignore[arg-type]
            scheduler=shipped_scheduler(device=self.device), attention=self.attention,
        )  # fmt: skip
        return StepTimer(lambda h, b: Engine(config, self.loaded, hooks=h, bench=b))

    def fraction(self, samples: list[tuple[StepLoad, float]]) -> dict[str, Any]:
        """The samples' measured and roofline seconds, summed, and their ratio."""
        measured = sum(s for _, s in samples)
        roofline = float(sum(self.cost.step_time(load) for load, _ in samples))
        return {"steps": len(samples), "measured_s": round(measured, 6),
                "roofline_s": round(roofline, 6),
                "fraction": round(roofline / measured, 4) if measured else None}  # fmt: skip

    def decode(self, batch: int, context: int) -> dict[str, Any]:
        """`batch` sequences at `context` tokens: the median decode step against its roofline."""
        per_seq = -(-(context + self.steps + batch + 4) // PAGE) + 1
        timer = self.timer(batch * per_seq + 8)
        one = SamplingParams(max_tokens=1, ignore_eos=True)
        prompts = []
        for i in range(batch):  # each context prefilled and cached first, one at a time
            seq = timer.engine.add_request(GenerateRequest(f"p{i}", self.prompt(context), one))
            _run(timer)
            prompts.append(seq.req.prompt_token_ids + tuple(seq.tokens[-1:]))
        # then all continue at once: a page's tail of prefill each, then decode together
        sampling = SamplingParams(max_tokens=self.steps + batch + 2, ignore_eos=True)
        timer.samples.clear()
        for i, prompt in enumerate(prompts):
            timer.engine.add_request(GenerateRequest(f"d{i}", prompt, sampling))
        _run(timer)
        decodes = [(ld, s) for ld, s in timer.samples if ld.tokens == ld.sequences == batch]
        if not decodes:
            raise RuntimeError(f"no decode step of {batch} sequences ran at {context} tokens")
        fractions = sorted(self.cost.step_time(ld) / s for ld, s in decodes)
        median_s = statistics.median(s for _, s in decodes)
        return {**self.fraction(decodes), "batch": batch, "context": context,
                "median_step_s": round(median_s, 6),
                "fraction": round(statistics.median(fractions), 4)}  # fmt: skip

    def prefill(self, tokens: int) -> dict[str, Any]:
        """A fresh prompt of `tokens`: every step of its prefill against its roofline."""
        timer = self.timer(-(-(tokens + 2) // PAGE) + 8)
        one = SamplingParams(max_tokens=1, ignore_eos=True)
        timer.engine.add_request(GenerateRequest("p", self.prompt(tokens), one))
        _run(timer)
        return {**self.fraction(timer.samples), "tokens": tokens}

    def returning(self, history: int, hole: int) -> dict[str, Any]:
        """A session whose oldest `hole` tokens were evicted returns with NEW_TOKENS more:
        the steps that recompute the hole and compute the new tokens, against the roofline."""
        pages = -(-(history + NEW_TOKENS + 2) // PAGE) + 4
        timer = self.timer(pages)
        one = SamplingParams(max_tokens=1, ignore_eos=True)
        first = self.prompt(history)
        a = timer.engine.add_request(GenerateRequest("a0", first, one, "a"))
        _run(timer)
        # another session takes the free pages and `hole` tokens more: a's oldest private
        # pages go
        free = (pages - -(-(history + 2) // PAGE)) * PAGE
        timer.engine.add_request(GenerateRequest("b0", self.prompt(free + hole), one, "b"))
        _run(timer)
        timer.samples.clear()
        back = first + tuple(a.tokens[len(first) :]) + self.prompt(NEW_TOKENS)
        seq = timer.engine.add_request(GenerateRequest("a1", back, one, "a"))
        _run(timer)
        usage = seq.usage
        return {**self.fraction(timer.samples), "history": history, "hole": hole,
                "recomputed_tokens": usage.recomputed_tokens, "new_tokens": usage.new_tokens,
                "device_tokens": usage.device_tokens}  # fmt: skip


def _run(timer: StepTimer, max_steps: int = 1_000_000) -> None:
    """Step until the engine has no work (a bounded loop: a stuck engine is an error)."""
    for _ in range(max_steps):
        if not timer.engine.has_work():
            return
        timer.step()
    raise RuntimeError(f"the engine still had work after {max_steps} steps")


def largest_batch(model: ModelConfig, context: int, cap: int, device: str) -> int:
    """The most sequences of `context` tokens whose KV fits KV_SHARE of the free memory."""
    if device != "cuda":
        return min(cap, CPU_BATCH)
    free, _ = torch.cuda.mem_get_info()
    per_seq = model.kv_bytes_per_token(2) * (context + 64)
    return max(1, min(cap, int(free * KV_SHARE // per_seq)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    device, dtype = device_and_dtype()
    cuda = device == "cuda"
    scale = 1 if cuda else args.cpu_scale
    model = QWEN3[args.model] if cuda else tiny_qwen3_config()
    cost = GpuCostModel(QWEN3[args.model], HARDWARE[args.hardware])
    bench = Bench(model, random_loaded(model, device, dtype), cost, device, dtype, args.steps,
                  args.attention)  # fmt: skip

    def lengths(text: str) -> list[int]:
        return [max(PAGE, int(x) // scale) for x in text.split(",")]

    cases: dict[str, dict[str, Any]] = {}
    for context in lengths(args.contexts):
        batches = sorted({1, largest_batch(model, context, args.max_batch, device)})
        for batch in batches:
            cases[f"decode-b{batch}-{context}"] = bench.decode(batch, context)
    # prefill and returning cases run twice, the second timed: the first compiles the
    # attention kernels of their shapes (flex), which a serving engine does once
    for tokens in lengths(args.prefill):
        bench.prefill(tokens)
        cases[f"prefill-{tokens}"] = bench.prefill(tokens)
    (history,), (hole,) = lengths(str(args.returning)), lengths(str(args.hole))
    bench.returning(history, hole)
    cases[f"return-{history}-hole-{hole}"] = bench.returning(history, hole)
    return {
        "bench": "steps",
        "device": torch.cuda.get_device_name() if cuda else cpu_fields().get("model name", "cpu"),
        "model": model.name, "roofline_model": cost.model.name, "hardware": cost.hw.name,
        "dtype": dtype, "torch": torch.__version__, "roofline_meaningful": cuda,
        "attention": resolve_backend(args.attention, device),
        "decode_graphs": uses_decode_graphs(EngineConfig(device=device, attention=args.attention)),
        "length_divisor": scale, "target_fraction": 0.7, "cases": cases,
    }  # fmt: skip


def table(result: dict[str, Any]) -> str:
    from bench.report import text_table

    rows = [("case", "steps", "measured s", "roofline s", "fraction")]
    for name, c in result["cases"].items():
        rows.append((name, str(c["steps"]), f"{c['measured_s']:.4f}", f"{c['roofline_s']:.4f}",
                     str(c["fraction"])))  # fmt: skip
    return text_table(rows, sep=" | ")


def build_parser() -> argparse.ArgumentParser:
    from penelope_cli.helpformat import parser

    ap = parser("penelope bench steps", __doc__)
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(QWEN3), help="shape (CUDA)")
    ap.add_argument("--hardware", default="h100", choices=sorted(HARDWARE), help="the roofline's")
    ap.add_argument("--contexts", default="8192,32768,100000", help="decode contexts, a list")
    ap.add_argument("--prefill", default="32768", help="fresh prompt lengths, a comma list")
    ap.add_argument("--returning", type=int, default=100_000, help="a returning session's tokens")
    ap.add_argument("--hole", type=int, default=20_000, help="its oldest tokens evicted")
    ap.add_argument("--max-batch", type=int, default=16, help="cap on the largest decode batch")
    ap.add_argument("--steps", type=int, default=8, help="decode steps timed per case")
    ap.add_argument("--cpu-scale", type=int, default=128, help="on a CPU: lengths / this")
    ap.add_argument("--attention", default="auto", choices=ATTENTION_BACKENDS.names(),
                    help="the engine's attention backend (auto: flex on CUDA)")  # fmt: skip
    ap.add_argument("--json", default=None, metavar="OUT", help="write the JSON here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if min(args.max_batch, args.steps, args.cpu_scale) < 1 or not 0 < args.hole < args.returning:
        raise SystemExit("max-batch, steps and cpu-scale must be >= 1, 0 < hole < returning")
    result = run(args)
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"PENELOPE {json.dumps(result)}")  # the line tests/gpu/run_gpu_checks.sh reports
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
