"""What one `penelope bench versus` run replays, and against which servers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.traces import DEFAULT_TRACE

MAX_POSITIONS = 8192  # the bundled model's trained context: `{max_len}`'s ceiling


@dataclass(frozen=True)
class ServerSpec:
    """One server: a name, its base URL, and optionally the shell command that starts it.

    The command may name `{port}` (the URL's), `{kv_tokens}` and `{kv_blocks}`
    (`kv_tokens // block_tokens`): the run's KV capacity times `kv_factor` (the tokens
    this server gets per token of the run's capacity: 2 for a bf16 KV at a float32
    server's bytes), `{block_tokens}`, and `{max_len}` (that capacity less one block, which
    vLLM keeps back, at most `MAX_POSITIONS`). `about` and `version_file` go into the report."""

    name: str
    url: str
    start: str = ""
    kv_factor: float = 1.0
    about: str = ""
    version_file: str = ""
    block_multiple: int = 1  # the server's KV blocks must be a multiple of this many tokens

    def __post_init__(self) -> None:
        if not self.name or not self.url.startswith(("http://", "https://")):
            raise ValueError(f"a server needs a name and an http(s) URL, got {self}")
        if self.kv_factor <= 0:
            raise ValueError(f"kv_factor must be positive, got {self.kv_factor}")

    def command(self, kv_tokens: int, block_tokens: int) -> str:
        from urllib.parse import urlparse

        port = urlparse(self.url).port or 80
        tokens = int(kv_tokens * self.kv_factor)
        return self.start.format(
            port=port,
            kv_tokens=tokens,
            kv_blocks=tokens // block_tokens,
            block_tokens=block_tokens,
            max_len=min(tokens - block_tokens, MAX_POSITIONS),
        )

    def version(self) -> str:
        """The first line of `version_file` (what the peer's install wrote), or ""."""
        path = Path(self.version_file)
        if self.version_file and path.is_file():
            return path.read_text().splitlines()[0]
        return ""


# The regimes an operator sizes a fleet in (issue 47; docs/results.md 1.7): 16 sessions
# at 1/32 of their length in a 4,000-token window, Poisson starts 4 s apart, 12 turns of
# 8 output tokens each; run them with --kv-tokens below the live working set. "busy":
# tool gaps as recorded, capped at 30 s (arrivals past a CPU server's service rate);
# "idle": gaps x2, capped at 60 s (idle sessions hold the memory).
_AGENT_FLEET = {
    "sessions": 16,
    "length_divisor": 32.0,
    "mean_interarrival_s": 4.0,
    "window_tokens": 4000,
    "max_turns": 12,
    "max_output_tokens": 8,
}
REGIMES: dict[str, dict[str, float | int]] = {
    "busy": {**_AGENT_FLEET, "time_divisor": 1.0, "max_gap_s": 30.0},
    "idle": {**_AGENT_FLEET, "time_divisor": 0.5, "max_gap_s": 60.0},
}


@dataclass(frozen=True)
class VersusConfig:
    servers: tuple[ServerSpec, ...]
    regime: str = ""  # the `REGIMES` entry the workload's options came from ("" none)
    trace: Path = DEFAULT_TRACE
    sessions: int = 6  # top-level Claude Code sessions per seed
    seeds: tuple[int, ...] = (0,)
    length_divisor: float = 64.0  # S: lengths x 1/S
    time_divisor: float = 64.0  # G: tool gaps x 1/G
    max_gap_s: float = 4.0  # scaled tool gaps are capped at this
    mean_interarrival_s: float = 1.0  # Poisson session starts
    window_tokens: int = 4096  # a session ends at its first request past this
    max_turns: int = 12  # each session's first turns only
    max_output_tokens: int = 16  # each turn's output, capped
    kv_tokens: tuple[int, ...] = ()  # KV capacities to sweep (needs --start); () = as running
    # Offered loads, as multiples of the service rate (`bench.versus.load`); () = the plan's
    # own starts and gaps. service_tok_s: that rate; 0 = timed on each server before the runs
    loads: tuple[float, ...] = ()
    service_tok_s: float = 0.0
    block_tokens: int = 16  # tokens per KV block / page, on every server
    raw_prompt_tokens: int = 2048  # the cold prefill of the raw-speed figure
    raw_repeats: int = 2
    vocab_low: int = 200
    vocab_high: int = 40000
    request_timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    out_dir: Path = field(default_factory=lambda: Path("versus-out"))

    def __post_init__(self) -> None:
        if not self.servers:
            raise ValueError("name at least one --server NAME=URL")
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"server names must differ, got {names}")
        if self.kv_tokens and not all(s.start for s in self.servers):
            raise ValueError("--kv-tokens sweeps need --start NAME=CMD for every server")
        if min(self.length_divisor, self.time_divisor) <= 0 or self.max_gap_s < 0:
            raise ValueError("length_divisor and time_divisor must be > 0, max_gap_s >= 0")
        if self.sessions < 1 or self.window_tokens < 2 or self.max_turns < 1:
            raise ValueError("sessions, window_tokens and max_turns must be positive")
        if self.max_output_tokens < 1 or self.block_tokens < 1 or self.raw_prompt_tokens < 2:
            raise ValueError("max_output_tokens, block_tokens, raw_prompt_tokens too small")
        for s in self.servers:
            if self.block_tokens % s.block_multiple:
                raise ValueError(f"{s.name} takes KV blocks of a multiple of {s.block_multiple} "
                                 f"tokens, got --block-tokens {self.block_tokens}")  # fmt: skip
        if any(x <= 0 for x in self.loads) or self.service_tok_s < 0:
            raise ValueError("loads must be positive and service_tok_s >= 0")
        if not 0 <= self.vocab_low < self.vocab_high:
            raise ValueError("need 0 <= vocab_low < vocab_high")
