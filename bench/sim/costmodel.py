"""Cost models: how long a batching step, a prefill and a KV copy take.

One step of continuous batching runs some prefill chunks and some decode
tokens: its `StepLoad` counts query tokens, sampled rows, attention pairs
(a prefill chunk of m tokens at offset a has m*a + m(m+1)/2 (query, key)
pairs, a decode token at context c has c+1), KV tokens read and requests.
A `CostModel` turns a load into seconds and a copy between tiers into seconds;
it is also the engine planner's `PlannerCost` (`recompute_s`: the sum of
`token_cost` over a segment's positions; `load_s`: `load_time`), so the
simulated scheduler decides load-or-recompute from the same numbers that time
its steps and copies.

`CpuCostModel` has coefficients fit by least squares to step timings of the
real engine (`fit`); `bench.sim.roofline.GpuCostModel` is the stated roofline
over Qwen3 on H100 and H200.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from penelope_engine.cache.tier import Tier
from penelope_engine.fit import nonneg_lstsq
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.tiers.planner import PlannerCost


class StepLoad(NamedTuple):
    """What one batching step computes (sums over its requests)."""

    tokens: int = 0  # query tokens: prefill chunk tokens + one per decoding request
    logit_rows: int = 0  # requests that sample a token this step
    attention_pairs: int = 0  # (query, key) pairs
    kv_read_tokens: int = 0  # KV tokens read by attention
    sequences: int = 0  # requests in the step

    @staticmethod
    def of(chunks: Sequence[tuple[int, int]], decode_contexts: Sequence[int]) -> StepLoad:
        """Chunks are (m tokens, at offset a); a decode at context c attends c + 1 keys."""
        m = sum(c[0] for c in chunks)
        pairs = sum(k * a + k * (k + 1) // 2 for k, a in chunks)
        read = sum(k + a for k, a in chunks) + sum(c + 1 for c in decode_contexts)
        n = len(chunks) + len(decode_contexts)
        return StepLoad(
            m + len(decode_contexts), n, pairs + sum(c + 1 for c in decode_contexts), read, n
        )


def step_load(items: Sequence[BatchItem]) -> StepLoad:
    """What a batch computes, the one measure for the engine's timer and the simulator's clock.

    A query at position p attends p + 1 keys (its own included).
    """
    tokens = pairs = keys = rows = 0
    for it in items:
        p = it.positions
        tokens += len(p)
        pairs += int(p.sum()) + len(p)
        keys += int(p[-1]) + 1
        rows += int(it.wants_token)
    return StepLoad(tokens, rows, pairs, keys, len(items))


class CostModel(PlannerCost, Protocol):
    @property
    def kv_bytes_per_token(self) -> int: ...

    def step_time(self, load: StepLoad) -> float:
        """Seconds of one step; attention_pairs and kv_read_tokens may be numpy arrays."""

    def token_cost(self, position: int) -> float:
        """Prefill compute of one token at `position`; linear in the position."""
        ...

    def load_time(self, tokens: int, tier: Tier) -> float:
        """Copy of `tokens` tokens' KV from `tier` (HOST or STORE) to the device."""
        ...

    def offload_time(self, tokens: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...


def num_layers(cost: CostModel) -> int:
    """The model's layer count, for copies that stream layer by layer (`GpuCostModel` knows
    it; a cost model fit to step timings does not)."""
    n = getattr(cost, "num_layers", None)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{type(cost).__name__} does not know the model's layers")
    return n


def linear_recompute_s(token_cost: Callable[[int], float], start: int, length: int) -> float:
    """Sum of a linear `token_cost` over positions start .. start + length - 1 (closed form)."""
    if length <= 0:
        return 0.0
    return length * (token_cost(start) + token_cost(start + length - 1)) / 2


def decode_run(cost: CostModel, first: StepLoad, n: int) -> np.ndarray:
    """Durations of n decode-only steps from `first`, every request one key longer each step."""
    grown = np.arange(n, dtype=np.int64) * first.sequences
    load = first._replace(  # array fields: step_time broadcasts over the n steps
        attention_pairs=first.attention_pairs + grown,  # type: ignore[arg-type]
        kv_read_tokens=first.kv_read_tokens + grown,  # type: ignore[arg-type]
    )
    return np.broadcast_to(np.asarray(cost.step_time(load), dtype=float), (n,))


def prefill_time(cost: CostModel, m: int, a: int = 0) -> float:
    """One prefill chunk of m tokens at offset a, alone in its step."""
    return cost.step_time(StepLoad.of([(m, a)], []))


def ttft_floor(cost: CostModel, prompt_len: int, known: int) -> float:
    """Least TTFT of a turn on any cache and scheduler: the `prompt_len - known` tokens
    its session and the shared prefix never had (at least the last), prefilled alone in
    one step on an idle replica, with nothing to load."""
    new = max(prompt_len - known, 1)
    return prefill_time(cost, new, prompt_len - new)


def turn_floor(cost: CostModel, prompt_len: int, known: int, output_len: int) -> float:
    """Least time of a turn on any cache: its `ttft_floor`, then its other output tokens
    decoded alone (chunking and batching only add time)."""
    decode = decode_run(cost, StepLoad.of([], [prompt_len]), output_len - 1)
    return ttft_floor(cost, prompt_len, known) + float(decode.sum())


class OtherCopies:
    """`inner`'s compute with copies between tiers costed otherwise: a subclass gives
    `load_time` and `offload_time` (`bench.sim.tiers.FreeCopies`,
    `bench.sim.copyrates.MeasuredCopies`); anything else is `inner`'s."""

    def __init__(self, inner: CostModel) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.inner.kv_bytes_per_token

    def step_time(self, load: StepLoad) -> float:
        return self.inner.step_time(load)

    def token_cost(self, position: int) -> float:
        return self.inner.token_cost(position)

    def recompute_s(self, start: int, length: int) -> float:
        return self.inner.recompute_s(start, length)

    def load_time(self, tokens: int, tier: Tier) -> float:
        raise NotImplementedError

    def offload_time(self, tokens: int) -> float:
        raise NotImplementedError

    def load_s(self, length: int, tier: Tier) -> float:
        return self.load_time(length, tier)


class TimedCosts:
    """What a cost model with `token_cost` and `load_time` answers the planner with.

    Offloads copy like host loads; recomputing a segment is the sum of its
    tokens' costs; loading it is its copy time.
    """

    def token_cost(self, position: int) -> float:
        raise NotImplementedError

    def load_time(self, tokens: int, tier: Tier) -> float:
        raise NotImplementedError

    def offload_time(self, tokens: int) -> float:
        return self.load_time(tokens, Tier.HOST)

    def recompute_s(self, start: int, length: int) -> float:
        """Sum of `token_cost` over the segment's positions."""
        return linear_recompute_s(self.token_cost, start, length)

    def load_s(self, length: int, tier: Tier) -> float:
        return self.load_time(length, tier)


@dataclass(frozen=True)
class CpuCostModel(TimedCosts):
    """step = c_step + c_lin * tokens + c_attn * attention_pairs + c_seq * sequences
    + c_row * logit_rows.

    `c_row` is the output projection of one sampled row (vocab x hidden: for
    the tiny Qwen3 it costs as much as a dozen prefill tokens), paid by every
    decode and by the last chunk of a prefill only.

    `row_costs`, when given, replaces `c_row * logit_rows`: the measured seconds
    of the output projection for 1, 2, ... rows (linear past the table). On a
    CPU it is not linear: torch's GEMM over the 151,669 x 256 projection of the
    tiny Qwen3 takes about 19, 38, 57 and 30 ms for 1, 2, 3 and 4 rows on one
    thread, so two or three decoding sequences cost more than four.
    """

    c_step: float
    c_lin: float
    c_attn: float
    c_seq: float
    kv_bytes_per_token: int
    copy_bytes_per_s: float = 5e9  # host <-> device pool copies (both in CPU memory)
    c_row: float = 0.0
    row_costs: tuple[float, ...] = ()  # seconds for 1, 2, ... sampled rows; overrides c_row

    def __post_init__(self) -> None:
        object.__setattr__(self, "row_costs", tuple(float(c) for c in self.row_costs))
        if min(self.c_step, self.c_lin, self.c_attn, self.c_seq, self.c_row, *self.row_costs) < 0:
            raise ValueError(f"cost coefficients must be >= 0, got {self}")
        if self.copy_bytes_per_s <= 0 or self.kv_bytes_per_token < 1:
            raise ValueError("copy_bytes_per_s must be > 0 and kv_bytes_per_token >= 1")

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CpuCostModel:
        """From `describe()` or `asdict()` output (the `kind` key is ignored)."""
        return CpuCostModel(**{k: v for k, v in d.items() if k != "kind"})

    def step_time(self, load: StepLoad) -> float:
        if load.sequences == 0:
            return 0.0
        return (
            self.c_step
            + self.c_lin * load.tokens
            + self.c_attn * load.attention_pairs
            + self.c_seq * load.sequences
            + self.rows_time(load.logit_rows)
        )

    def rows_time(self, rows: int) -> float:
        """Seconds of the output projection for `rows` sampled rows."""
        return _table_time(self.row_costs, rows) if self.row_costs else self.c_row * rows

    def token_cost(self, position: int) -> float:
        return self.c_lin + self.c_attn * (position + 1)

    def load_time(self, tokens: int, tier: Tier) -> float:
        """Both tiers copy at `copy_bytes_per_s` (host and store are CPU memory here)."""
        return tokens * self.kv_bytes_per_token / self.copy_bytes_per_s

    def describe(self) -> dict[str, Any]:
        return {"kind": "cpu-fit", **asdict(self)}

    @staticmethod
    def fit(
        samples: Sequence[tuple[StepLoad, float]],
        kv_bytes_per_token: int,
        copy_bytes_per_s: float = 5e9,
        row_costs: Sequence[float] = (),
    ) -> CpuCostModel:
        """Non-negative least squares over (step load, measured seconds) samples.

        Each sample is weighted by 1 / seconds, so the fit minimises relative
        error: short decode steps count as much as long prefills. With measured
        `row_costs` the output projection's time is taken from them and the
        other coefficients are fit to what is left.
        """
        if len(samples) < 5:
            raise ValueError(
                f"need at least 5 timing samples to fit 5 coefficients, got {len(samples)}"
            )
        table = tuple(float(c) for c in row_costs)
        x = np.array(
            [[1.0, s.tokens, s.attention_pairs, s.sequences, s.logit_rows] for s, _ in samples]
        )
        y = np.array([t for _, t in samples])
        if table:  # the rows' time is known: fit the other four coefficients to the rest
            x = x[:, :4]
            known = np.array([_table_time(table, s.logit_rows) for s, _ in samples])
        else:
            known = np.zeros(len(y))
        w = 1.0 / np.maximum(y, 1e-9)
        coef = [float(c) for c in nonneg_lstsq(x * w[:, None], (y - known) * w)]
        c_step, c_lin, c_attn, c_seq = coef[:4]
        return CpuCostModel(
            c_step=c_step,
            c_lin=c_lin,
            c_attn=c_attn,
            c_seq=c_seq,
            kv_bytes_per_token=kv_bytes_per_token,
            copy_bytes_per_s=copy_bytes_per_s,
            c_row=0.0 if table else coef[4],
            row_costs=table,
        )


def _table_time(table: tuple[float, ...], rows: int) -> float:
    """Seconds for `rows` from measured times of 1, 2, ... rows; linear past the table."""
    if rows <= 0:
        return 0.0
    if rows <= len(table):
        return table[rows - 1]
    slope = table[-1] - table[-2] if len(table) >= 2 else table[-1]
    return table[-1] + max(slope, 0.0) * (rows - len(table))
