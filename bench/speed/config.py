"""What one `penelope bench speed` run measures, and on which servers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedConfig:
    model: str = "smollm2-135m"
    dtype: str = "float32"
    prompt_tokens: int = 2048  # the fresh prompt of the prefill / TTFT figure
    decode_prompt_tokens: int = 64  # prompt of each decode stream
    decode_tokens: int = 64  # tokens each decode stream asks for
    batch: int = 8  # concurrent decode streams of the batched figure
    turns: int = 6  # turns of the session
    shared_tokens: int = 1024  # the session's first prompt
    turn_tokens: int = 128  # new tokens each later turn appends
    turn_max_tokens: int = 8  # tokens each turn generates
    repeats: int = 3  # alternating runs; figures are medians
    device_pages: int = 4096  # our server's KV pages
    page_size: int = 16
    seed: int = 0
    vocab_low: int = 200  # prompts draw token ids from [vocab_low, vocab_high)
    vocab_high: int = 40000
    startup_timeout_s: float = 300.0
    request_timeout_s: float = 600.0
    against: str = ""  # base URL of the other server (empty: ours only)
    against_pid: int = 0  # its process id: CPU is read over its process tree
    against_model: str = ""  # its model name (empty: the first of its /v1/models)
