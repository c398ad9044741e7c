"""The peers `penelope bench speed --peers` starts from the project's own scripts, by name.

Each is a shell command over `{port}` and `{batch}` (llama-server gets one slot
per concurrent stream of the batched figure, as its users size `-np` to their
concurrency), run in its own process group by `bench.child.server_process`
and stopped after the bench. The scripts build the peers first
(`scripts/llama_server_env.sh install && ... models`,
`scripts/vllm_cpu_env.sh install && ... convert`); a peer that is not built
fails to start, and its log says why. Each runs one thread, as our server does.

    llama-f32      llama.cpp's llama-server, the bundled GGUF as F32
    llama-q8_0     the same, requantized to Q8_0 (8-bit blocks of 32)
    vllm-float32   vLLM-CPU 0.32, compiled (no --enforce-eager), prefix caching on
    vllm-bfloat16  the same in bfloat16 (native where the CPU has avx512_bf16 or AMX)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from penelope_engine.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
_LLAMA = (
    "LLAMA_SLOTS={batch} LLAMA_THREADS=1 exec bash scripts/llama_server_env.sh run {weights} {port}"
)
_VLLM = "VLLM_PORT={port} exec bash scripts/vllm_cpu_env.sh serve {dtype}"


@dataclass(frozen=True)
class Peer:
    name: str
    command: str  # a shell command over {port} and {batch}, run from the repository root
    weights: str  # what its weights are, for the report
    version_file: str = ""  # a file the install wrote that names the version, if any

    def shell(self, port: int, batch: int) -> str:
        return f"cd {ROOT} && " + self.command.format(port=port, batch=batch)

    def version(self) -> str:
        path = Path(self.version_file)
        if self.version_file and path.is_file():
            return path.read_text().splitlines()[0]
        return ""


def _llama(weights: str) -> Peer:
    command = _LLAMA.replace("{weights}", weights)
    return Peer(f"llama-{weights}", command, f"GGUF {weights.upper()}", "/tmp/llama-cpp/VERSION")


def _vllm(dtype: str) -> Peer:
    return Peer(f"vllm-{dtype}", _VLLM.replace("{dtype}", dtype), dtype)


SPEED_PEERS: Registry[Peer] = Registry(
    "speed peer",
    {p.name: p for p in (_llama("f32"), _llama("q8_0"), _vllm("float32"), _vllm("bfloat16"))},
)
