"""What one `penelope bench speed` run measures, and on which servers."""

from __future__ import annotations

from dataclasses import dataclass, field

from penelope_engine.config import DType, Weights


@dataclass(frozen=True)
class SpeedConfig:
    """One `penelope bench speed` option per field; its help is the field's `help` metadata."""

    model: str = field(
        default="smollm2-135m",
        metadata={"help": "our server's model (registered name or checkpoint directory)"},
    )
    dtype: DType = field(default="float32", metadata={"help": "our server's model and KV dtype"})
    weights: Weights = field(
        default="float", metadata={"help": "our server's linear-layer weights: float, int8, int4"}
    )
    prompt_tokens: int = field(
        default=2048,
        metadata={"help": "length of the fresh prompt of the prefill and TTFT figures"},
    )
    decode_prompt_tokens: int = field(
        default=64, metadata={"help": "prompt length of each decode stream"}
    )
    decode_tokens: int = field(default=64, metadata={"help": "tokens each decode stream asks for"})
    batch: int = field(
        default=8, metadata={"help": "concurrent streams of the batched decode figure"}
    )
    turns: int = field(default=6, metadata={"help": "turns of the session"})
    shared_tokens: int = field(default=1024, metadata={"help": "the session's first prompt length"})
    turn_tokens: int = field(default=128, metadata={"help": "new tokens each later turn appends"})
    turn_max_tokens: int = field(default=8, metadata={"help": "tokens each turn generates"})
    repeats: int = field(
        default=3, metadata={"help": "alternating runs; figures are their medians"}
    )
    constrained_steps: int = field(
        default=32,
        metadata={"help": "decode steps of the grammar's cost figure, in this process (0: none)"},
    )
    device_pages: int = field(default=4096, metadata={"help": "our server's device KV pages"})
    page_size: int = field(default=16, metadata={"help": "our server's tokens per KV page"})
    seed: int = field(default=0, metadata={"help": "seed of every prompt"})
    vocab_low: int = field(
        default=200, metadata={"help": "prompts draw token ids from [vocab-low, vocab-high)"}
    )
    vocab_high: int = field(
        default=40000, metadata={"help": "prompts draw token ids from [vocab-low, vocab-high)"}
    )
    startup_timeout_s: float = field(
        default=300.0, metadata={"help": "our server must answer /health within this"}
    )
    request_timeout_s: float = field(
        default=600.0, metadata={"help": "each request must finish within this"}
    )
    against: str = field(
        default="", metadata={"help": "base URL of the other server (none: ours only)"}
    )
    against_pid: int = field(
        default=0, metadata={"help": "the other server's process id (its tree's CPU is read)"}
    )
    peers: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "peers to start from the project's scripts, side by side in this run "
            "(comma list of llama-f32, llama-q8_0, vllm-float32, vllm-bfloat16)"
        },
    )
    against_model: str = field(
        default="",
        metadata={"help": "the other server's model name (none: the first of its /v1/models)"},
    )

    def __post_init__(self) -> None:
        from bench.speed.peers import SPEED_PEERS

        for name in self.peers:
            SPEED_PEERS.check(name)  # UnknownNameError lists the valid ones
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"each peer once, got {self.peers}")
        if bool(self.against) != bool(self.against_pid):
            raise ValueError("--against and --against-pid go together")
