"""Published measurements of Qwen3-8B on one GPU, and the stated roofline on the same points.

`PUBLISHED` holds figures that others measured and published, each with its source, engine,
precision, GPU and lengths; `modelled` evaluates `bench.sim.roofline.GpuCostModel` on the
same point and `compare` pairs the two. A figure with a `dropped` reason is kept for
reference only and does not test the constants; every other one must lie within
`TOLERANCE` of the model (tests/cpu/bench/sim/test_published.py).

What a figure measures (`what`):
    prefill_s      one prompt of `tokens` tokens alone on the GPU, to its first token,
                   prefilled in chunks of `chunk` tokens (0: in one step)
    decode_step_s  one decode step of `batch` sequences, each holding `context` KV tokens
    e2e_s          one prompt of `tokens` tokens, then `generated` tokens at batch 1: the
                   prefill (in chunks of `chunk`) gives the first, `generated - 1` decode
                   steps the rest

Searched and not found (Dec 2026): a published BF16 time to first token of one 8K, 32K or
128K prompt, or a batch-1 decode step, for Qwen3-8B (or Llama-3.1-8B) on an H100 or H200.
NVIDIA's NIM table for Llama-3.1-8B on H100 decodes at batch 1 in 4.4-4.6 ms, faster than
BF16 weights can be read once at peak bandwidth (4.8 ms), so it is FP8; TensorRT-LLM's and
Lambda's tables are FP8 throughput sweeps. The one single-prompt long-context table found
is Qwen's own, on an H20 (below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from bench.sim.costmodel import StepLoad
from bench.sim.roofline import HARDWARE, QWEN3, GpuCostModel, Hardware

TOLERANCE = 0.25  # |modelled / published - 1| allowed for a figure that is not dropped

What = Literal["prefill_s", "decode_step_s", "e2e_s"]

# GPUs a published figure was measured on that the simulator does not offer. The H20's
# spec (NVIDIA: 148 TFLOPS dense BF16, 96 GB HBM3 at 4.0 TB/s, PCIe Gen5) with the same
# efficiency constants as the modelled GPUs; used only to evaluate the Qwen table.
REFERENCE_HARDWARE: dict[str, Hardware] = {
    "h20": Hardware("H20 96GB", 148e12, 96e9, 4.0e12, 64e9),
}


def hardware(gpu: str) -> Hardware:
    if gpu in HARDWARE:
        return HARDWARE[gpu]
    if gpu in REFERENCE_HARDWARE:
        return REFERENCE_HARDWARE[gpu]
    raise ValueError(f"unknown gpu {gpu!r}")


@dataclass(frozen=True)
class Published:
    model: str  # key of bench.sim.roofline.QWEN3
    gpu: str  # key of HARDWARE or REFERENCE_HARDWARE
    what: What
    value: float  # seconds
    source: str
    engine: str
    notes: str
    precision: str = "bf16"
    tokens: int = 0  # prefill_s, e2e_s: prompt tokens
    chunk: int = 0  # prefill_s, e2e_s: prefill chunk (0: the whole prompt in one step)
    generated: int = 0  # e2e_s: tokens generated (the first by the prefill)
    batch: int = 0  # decode_step_s: sequences in the step
    context: int = 0  # decode_step_s: KV tokens each sequence holds
    dropped: str = ""  # why the figure does not test the constants; empty: it does

    @property
    def point(self) -> str:
        if self.what == "decode_step_s":
            return f"decode step, batch {self.batch}, context {self.context:,}"
        if self.what == "prefill_s":
            return f"prefill of {self.tokens:,} tokens"
        return f"{self.tokens:,}-token prompt + {self.generated:,} generated, batch 1"


# ML.ENERGY Leaderboard v3 (published 2025-12-01): vLLM 0.11.1 serving Qwen3-8B in BF16 on
# one H100 SXM 80GB, max_num_seqs swept; median_itl_ms is the median client-side gap
# between streamed tokens over the steady state (the batch full), i.e. a decode step.
_MLE_ENGINE = "vLLM 0.11.1, TP1, async scheduling, max-num-batched-tokens 8192"
_MLE_SETUP = (
    "set-up: github.com/ml-energy/benchmark configs/vllm/{task}/Qwen/Qwen3-8B/H100 @c1d6557"
)
_MLE_ARENA = (
    "ML.ENERGY Leaderboard v3, github.com/ml-energy/leaderboard "
    "public/data/models/Qwen__Qwen3-8B__lm-arena-chat.json @82e15a4, median_itl_ms; "
    + _MLE_SETUP.format(task="lm-arena-chat")
)
_MLE_GPQA = (
    "ML.ENERGY Leaderboard v3, github.com/ml-energy/leaderboard "
    "public/data/models/Qwen__Qwen3-8B__gpqa.json @82e15a4, median_itl_ms; "
    + _MLE_SETUP.format(task="gpqa")
)
_ARENA_CONTEXT = (
    "LM Arena chat, thinking off, mean output {out} tokens; context = an assumed 500-token "
    "prompt (prompt lengths are not in the published file; requests carry the earlier "
    "turns) + {pos}, the token-weighted mean decode position of the published "
    "output-length histogram"
)
_GPQA_CONTEXT = (
    "GPQA Diamond, thinking on, mean output {out} tokens; context = an assumed 300-token "
    "prompt + {pos}, the token-weighted mean decode position of the published "
    "output-length histogram (the prompt is < 6 % of it)"
)

# Qwen's speed benchmark of Qwen3-8B, SGLang (table "Qwen3-8B (SGLang)"): speed =
# (prompt + 2048 generated tokens) / time at batch 1, BF16, one NVIDIA H20 96GB.
_QWEN_SOURCE = (
    "Qwen speed benchmark, qwen.readthedocs.io/en/latest/getting_started/speed_benchmark.html "
    "(github.com/QwenLM/Qwen2.5 docs/source/getting_started/speed_benchmark.md @ac72724), "
    "table Qwen3-8B (SGLang), BF16 row: {speed} tokens/s"
)
# The table does not state the prefill chunk; modelled as 8192 (2048 would add < 0.2 %).
_QWEN_ENGINE = "SGLang 0.4.6.post1, enable_mixed_chunk, context_length 140000"
_QWEN_DROPPED = (
    "H20, not a modelled GPU (spec entry in REFERENCE_HARDWARE); every row holds 2,047 "
    "batch-1 decode steps that the 1-token row puts at 12.2 ms each, slower than the H100 "
    "steps above at batch 8 (8.2 ms) on a GPU with 1.2x the bandwidth: per-step engine "
    "overhead the roofline's efficiency constants cannot carry, so the rows mix a prefill "
    "test with that overhead"
)


def _qwen_h20(tokens: int, speed: float) -> Published:
    return Published(
        model="qwen3-8b",
        gpu="h20",
        what="e2e_s",
        value=(tokens + 2048) / speed,
        source=_QWEN_SOURCE.format(speed=speed),
        engine=_QWEN_ENGINE,
        notes="value = (prompt + 2048) / speed",
        tokens=tokens,
        chunk=8192,
        generated=2048,
        dropped=_QWEN_DROPPED,
    )


def _mle(
    task: str, batch: int, itl_ms: float, out: int, pos: int, prompt: int, extra: str = ""
) -> Published:
    arena = task == "lm-arena-chat"
    return Published(
        model="qwen3-8b",
        gpu="h100",
        what="decode_step_s",
        value=itl_ms / 1e3,
        source=_MLE_ARENA if arena else _MLE_GPQA,
        engine=_MLE_ENGINE,
        notes=(_ARENA_CONTEXT if arena else _GPQA_CONTEXT).format(out=out, pos=pos) + extra,
        batch=batch,
        context=prompt + pos,
    )


PUBLISHED: tuple[Published, ...] = (
    # batch = the run's average batch (127.8 at max_num_seqs 128, 63.3 at 64), rounded
    _mle("lm-arena-chat", 8, 8.20, 647, 610, prompt=500),
    _mle("lm-arena-chat", 32, 10.57, 647, 614, prompt=500),
    _mle(
        "lm-arena-chat",
        128,
        20.70,
        641,
        593,
        prompt=500,
        extra="; the point most sensitive to the assumed prompt: each 100 prompt tokens "
        "add 1.9 GB of KV reads to the step",
    ),
    _mle("gpqa", 8, 9.70, 7854, 4953, prompt=300),
    _mle("gpqa", 32, 16.87, 8170, 5252, prompt=300),
    _mle("gpqa", 63, 26.64, 8367, 5403, prompt=300),
    # the table labels the last row 129042; its notes list the inputs as 1 ... 129024
    _qwen_h20(1, 81.73),
    _qwen_h20(6144, 296.25),
    _qwen_h20(14336, 524.70),
    _qwen_h20(30720, 832.67),
    _qwen_h20(63488, 1112.78),
    _qwen_h20(129024, 1173.32),
)


def _prefill_s(cost: GpuCostModel, tokens: int, chunk: int) -> float:
    step = chunk if chunk > 0 else tokens
    return sum(
        float(cost.step_time(StepLoad.of([(min(step, tokens - a), a)], [])))
        for a in range(0, tokens, step)
    )


def modelled(p: Published) -> float:
    """The stated roofline's seconds for the published point."""
    cost = GpuCostModel(QWEN3[p.model], hardware(p.gpu))
    if p.what == "decode_step_s":
        return float(cost.step_time(StepLoad.of([], [p.context] * p.batch)))
    if p.what == "prefill_s":
        return _prefill_s(cost, p.tokens, p.chunk)
    if p.what == "e2e_s":
        keys = np.arange(p.tokens, p.tokens + p.generated - 1) + 1  # decode at c attends c+1
        decode = cost.step_time(StepLoad(1, 1, keys, keys, 1))  # type: ignore[arg-type]
        return _prefill_s(cost, p.tokens, p.chunk) + float(np.sum(decode))
    raise ValueError(f"unknown what {p.what!r}")


class Comparison(NamedTuple):
    published: Published
    modelled: float

    @property
    def ratio(self) -> float:
        return self.modelled / self.published.value


def compare(points: tuple[Published, ...] = PUBLISHED) -> list[Comparison]:
    return [Comparison(p, modelled(p)) for p in points]


def _seconds(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def markdown(points: tuple[Published, ...] = PUBLISHED) -> str:
    """The docs table: published vs modelled per point, the ratio and the source."""
    lines = [
        "| model / GPU | point | published | modelled | modelled / published | engine "
        "| checked | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in compare(points):
        p = c.published
        lines.append(
            f"| {QWEN3[p.model].name} / {hardware(p.gpu).name}, {p.precision} | {p.point} "
            f"| {_seconds(p.value)} | {_seconds(c.modelled)} | {c.ratio:.2f} | {p.engine} "
            f"| {'no: ' + p.dropped if p.dropped else 'yes'} | {p.source} |"
        )
    return "\n".join(lines)
