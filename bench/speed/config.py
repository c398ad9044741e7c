"""What one `penelope bench speed` run measures, and on which servers."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import option
from penelope_engine.config import DType, Weights


@dataclass(frozen=True)
class SpeedConfig:
    """One `penelope bench speed` option per field; its help is the field's `help` metadata."""

    model: str = option(
        "smollm2-135m", "our server's model (registered name or checkpoint directory)"
    )
    dtype: DType = option("float32", "our server's model and KV dtype")
    weights: Weights = option("float", "our server's linear-layer weights: float, int8, int4")
    prompt_tokens: int = option(2048, "length of the fresh prompt of the prefill and TTFT figures")
    decode_prompt_tokens: int = option(64, "prompt length of each decode stream")
    decode_tokens: int = option(64, "tokens each decode stream asks for")
    batch: int = option(8, "concurrent streams of the batched decode figure")
    turns: int = option(6, "turns of the session")
    shared_tokens: int = option(1024, "the session's first prompt length")
    turn_tokens: int = option(128, "new tokens each later turn appends")
    turn_max_tokens: int = option(8, "tokens each turn generates")
    repeats: int = option(3, "alternating runs; figures are their medians")
    constrained_steps: int = option(
        32, "decode steps of the grammar's cost figure, in this process (0: none)"
    )
    device_pages: int = option(4096, "our server's device KV pages")
    page_size: int = option(16, "our server's tokens per KV page")
    seed: int = option(0, "seed of every prompt")
    vocab_low: int = option(200, "prompts draw token ids from [vocab-low, vocab-high)")
    vocab_high: int = option(40000, "prompts draw token ids from [vocab-low, vocab-high)")
    startup_timeout_s: float = option(300.0, "our server must answer /health within this")
    request_timeout_s: float = option(600.0, "each request must finish within this")
    against: str = option("", "base URL of the other server (none: ours only)")
    against_pid: int = option(0, "the other server's process id (its tree's CPU is read)")
    peers: tuple[str, ...] = option(
        (),
        "peers to start from the project's scripts, side by side in this run "
        "(comma list of llama-f32, llama-q8_0, vllm-float32, vllm-bfloat16)",
    )
    against_model: str = option(
        "", "the other server's model name (none: the first of its /v1/models)"
    )

    def __post_init__(self) -> None:
        from bench.speed.peers import SPEED_PEERS

        for name in self.peers:
            SPEED_PEERS.check(name)  # UnknownNameError lists the valid ones
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"each peer once, got {self.peers}")
        if bool(self.against) != bool(self.against_pid):
            raise ValueError("--against and --against-pid go together")
