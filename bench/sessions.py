"""One typed representation of agent traces: `Session`s of `Turn`s, already scaled.

`bench.traces` reads both trace formats into these; `Scale` states the length
and time factors every result carries.

A session's input starts with its cross-session prefix (`Session.prefix_blocks`):
the system prompt, then the tool schemas, in the order the engine's chat
template renders them. Sessions whose blocks have equal kinds and keys share
those blocks' tokens (`bench.tokens`); a session without blocks starts with the
one stream every such session shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Scale:
    """One length factor and one time factor, stated in every result."""

    length: float = 1.0
    time: float = 1.0

    def __post_init__(self) -> None:
        if not self.length > 0 or not self.time > 0:
            raise ValueError(f"scale factors must be positive, got {self}")

    def block_tokens(self, block_size: int) -> int:
        """Tokens of one scaled trace block; a factor that leaves less than one is refused
        (it used to be read as 1/block_size, so a run claimed a scale it did not have)."""
        n = round(block_size * self.length)
        if n < 1:
            raise ValueError(
                f"length scale {self.length:g} maps a {block_size}-token trace block to less "
                f"than one token; the finest this trace allows is 1/{block_size}"
            )
        return n

    def tokens(self, n: int, block_size: int) -> int:
        """`n` trace tokens at the effective factor block_tokens / block_size."""
        return round(n * self.block_tokens(block_size) / block_size)

    def describe(self, block_size: int) -> dict[str, float]:
        bt = self.block_tokens(block_size)
        return {
            "length_scale": self.length,
            "effective_length_scale": bt / block_size,
            "block_size": block_size,
            "block_tokens": bt,
            "time_scale": self.time,
        }


@dataclass(frozen=True)
class Turn:
    """One request of a session. Lengths and times are scaled."""

    think_time_s: float  # tool or user time between the previous turn's last token and this one
    offset_s: float  # the request's time in the trace, since the session started
    block_runs: tuple[tuple[int, int], ...]  # input block ids as (first id, count) runs, in order
    input_tokens: int
    output_tokens: int
    stop_reason: str  # "tool_use", "end_turn", or "" when the trace does not say
    shared_prefix_tokens: int  # leading input tokens of the cross-session prefix

    def __post_init__(self) -> None:
        if self.input_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"a turn needs input and output tokens, got {self}")
        if not 0 <= self.shared_prefix_tokens <= self.input_tokens:
            raise ValueError("shared_prefix_tokens must be within the input")
        if self.think_time_s < 0:
            raise ValueError(f"think_time_s must be >= 0, got {self.think_time_s}")

    @property
    def num_blocks(self) -> int:
        return sum(n for _, n in self.block_runs)

    def block_ids(self) -> np.ndarray:
        """The input's block ids, expanded (uint64)."""
        if not self.block_runs:
            return np.empty(0, dtype=np.uint64)
        return np.concatenate([np.arange(s, s + n, dtype=np.uint64) for s, n in self.block_runs])


SYSTEM = "system"  # PrefixBlock kinds
TOOLS = "tools"


@dataclass(frozen=True)
class PrefixBlock:
    """One block of a session's cross-session prefix; sessions whose blocks have equal
    `kind` and `key` share its token ids."""

    kind: str  # SYSTEM or TOOLS
    key: str  # the trace's identity of the content (Claude Code: its recorded token count)
    tokens: int  # scaled length

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"a prefix block's length must be >= 0, got {self}")


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    block_tokens: int  # tokens per trace block after scaling
    block_scope: str  # namespace of the block ids: the session (local ids) or the trace (global)
    parent_id: str | None = None  # set for a subagent
    after_turn: int = -1  # a subagent starts after this parent turn ends (-1: at the parent start)
    start_delay_s: float = 0.0
    trace_start_s: float = 0.0  # when the session began in the trace (Mooncake)
    # The cross-session prefix in the engine's order (system, then tools); () when the
    # trace names none: its turns' shared_prefix_tokens come from the one common stream.
    prefix_blocks: tuple[PrefixBlock, ...] = ()

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"session {self.id} has no turns")
        if self.prefix_blocks:
            total = sum(b.tokens for b in self.prefix_blocks)
            if any(t.shared_prefix_tokens > total for t in self.turns):
                raise ValueError(f"session {self.id}: a turn's shared prefix exceeds its blocks")

    @property
    def tool_time_s(self) -> float:
        return sum(t.think_time_s for t in self.turns[1:])


@dataclass(frozen=True)
class Trace:
    name: str  # "claude_code" or "mooncake"
    sessions: tuple[Session, ...]  # top-level sessions and subagents, in trace order
    scale: Scale
    block_size: int

    def describe(self) -> dict[str, Any]:
        return {
            "trace": self.name,
            "sessions": len(self.sessions),
            **self.scale.describe(self.block_size),
        }
