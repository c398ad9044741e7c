"""The soak bench's settings (`SoakConfig`, one option each) and the model it serves."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.checks import positive, shares

MODEL = "tiny-qwen3"


@dataclass(frozen=True)
class SoakConfig:
    """One `penelope bench soak` option per field; its help is the field's `help` metadata.

    The time-to-live settings are short so that a soak of minutes expires records as
    often as a server up for weeks would with its production settings.
    """

    requests: int = field(default=100_000, metadata={"help": "requests to send in all"})
    concurrency: int = field(default=16, metadata={"help": "requests in flight at once"})
    sessionless_share: float = field(
        default=0.5, metadata={"help": "share of requests sent without a session id"}
    )
    max_turns: int = field(
        default=8, metadata={"help": "a session has 2 to this many turns (uniform)"}
    )
    prompt_tokens: int = field(
        default=48,
        metadata={"help": "first-turn prompt length; later turns add the reply and 8 tokens"},
    )
    max_prompt_tokens: int = field(
        default=256,
        metadata={"help": "a session whose next prompt would pass this ends; a new one starts"},
    )
    prefix_tokens: int = field(
        default=16, metadata={"help": "length of the prefix some prompts share"}
    )
    prefix_share: float = field(
        default=0.5, metadata={"help": "share of sessions and sessionless prompts with it"}
    )
    max_tokens: int = field(default=2, metadata={"help": "output tokens per request"})
    page_size: int = field(default=4, metadata={"help": "tokens per KV page"})
    device_pages: int = field(default=512, metadata={"help": "the server's device KV pages"})
    host_pages: int = field(default=512, metadata={"help": "the server's host KV pages"})
    store_mib: int = field(
        default=64,
        metadata={"help": "the Arrow store's budget (MiB, a temp dir): full within warm-up"},
    )
    session_ttl_s: float = field(
        default=20.0,
        metadata={"help": "idle session records expire after this (short: minutes act as weeks)"},
    )
    store_record_ttl_s: float = field(
        default=60.0,
        metadata={"help": "path records expire after this (short: minutes act as weeks)"},
    )
    sample_period_s: float = field(
        default=2.0, metadata={"help": "seconds between two samples of the server's state"}
    )
    warmup_share: float = field(
        default=0.25, metadata={"help": "share of requests that is warm-up, before the slopes"}
    )
    deadline_s: float = field(
        default=5400.0, metadata={"help": "no request is sent after this many seconds"}
    )
    seed: int = field(default=0, metadata={"help": "seed of every worker's draws"})
    threads: int = field(default=1, metadata={"help": "the server's torch threads"})

    def __post_init__(self) -> None:
        positive(self, "requests", "concurrency", "prompt_tokens", "max_tokens", "page_size",
                 "device_pages", "store_mib", "session_ttl_s", "store_record_ttl_s",
                 "sample_period_s", "deadline_s", "threads")  # fmt: skip
        shares(self, "sessionless_share", "prefix_share")
        if not 0 <= self.warmup_share < 1:
            raise ValueError(f"warmup_share must be in [0, 1), got {self.warmup_share}")
        if self.max_turns < 2:
            raise ValueError(f"max_turns must be at least 2, got {self.max_turns}")
        if self.host_pages < 0 or self.prefix_tokens < 0:
            raise ValueError("host_pages and prefix_tokens must be >= 0")
        if not self.prefix_tokens < self.prompt_tokens <= self.max_prompt_tokens:
            raise ValueError(
                "need prefix_tokens < prompt_tokens <= max_prompt_tokens, got "
                f"{self.prefix_tokens}, {self.prompt_tokens}, {self.max_prompt_tokens}"
            )

    @property
    def warmup_requests(self) -> int:
        """Requests finished by the end of warm-up: slopes are fitted after this."""
        return int(self.warmup_share * self.requests)
