"""The soak bench's settings (`SoakConfig`, one option each) and the model it serves."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import option, positive, shares

MODEL = "tiny-qwen3"


@dataclass(frozen=True)
class SoakConfig:
    """One `penelope bench soak` option per field; its help is the field's `help` metadata.

    The time-to-live settings are short so that a soak of minutes expires records as
    often as a server up for weeks would with its production settings.
    """

    requests: int = option(100_000, "requests to send in all")
    concurrency: int = option(16, "requests in flight at once")
    sessionless_share: float = option(0.5, "share of requests sent without a session id")
    max_turns: int = option(8, "a session has 2 to this many turns (uniform)")
    prompt_tokens: int = option(
        48, "first-turn prompt length; later turns add the reply and 8 tokens"
    )
    max_prompt_tokens: int = option(
        256, "a session whose next prompt would pass this ends; a new one starts"
    )
    prefix_tokens: int = option(16, "length of the prefix some prompts share")
    prefix_share: float = option(0.5, "share of sessions and sessionless prompts with it")
    max_tokens: int = option(2, "output tokens per request")
    page_size: int = option(4, "tokens per KV page")
    device_pages: int = option(512, "the server's device KV pages")
    host_pages: int = option(512, "the server's host KV pages")
    store_mib: int = option(64, "the Arrow store's budget (MiB, a temp dir): full within warm-up")
    session_ttl_s: float = option(
        20.0, "idle session records expire after this (short: minutes act as weeks)"
    )
    store_record_ttl_s: float = option(
        60.0, "path records expire after this (short: minutes act as weeks)"
    )
    sample_period_s: float = option(2.0, "seconds between two samples of the server's state")
    warmup_share: float = option(0.25, "share of requests that is warm-up, before the slopes")
    deadline_s: float = option(5400.0, "no request is sent after this many seconds")
    seed: int = option(0, "seed of every worker's draws")
    threads: int = option(1, "the server's torch threads")

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
