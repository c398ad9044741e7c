"""`ATTENTION_BACKENDS`: how a step's attention runs, by name (no torch here; configs check names).

- ``pieces``: SDPA over gathered pages, a multi-query sequence in pieces each over
  the keys it can see (`run_attention`), decode rows by the CPU's C kernel where it
  is built (`cpu_kernels`): the CPU's backend;
- ``sdpa``: the same without the C kernel, the reference the others are tested against;
- ``flex``: FlexAttention straight over the pool through the page table
  (`flex_paged`), compiled: what CUDA runs;
- ``auto``: ``flex`` on CUDA, ``pieces`` elsewhere.
"""

from __future__ import annotations

from penelope_engine.registry import Registry

ATTENTION_BACKENDS: Registry[str] = Registry(
    "attention backend",
    {
        "auto": "flex on CUDA, pieces elsewhere",
        "pieces": "SDPA in pieces over gathered pages; the CPU's C decode kernel",
        "sdpa": "SDPA over gathered pages: the reference",
        "flex": "FlexAttention over the pool through the page table (compiled)",
    },
)


def resolve_backend(name: str, device: str) -> str:
    """The backend `name` runs on `device` (``cpu``, ``cuda``, ``cuda:N``): `auto` resolved.
    Raises `UnknownNameError` listing the names."""
    ATTENTION_BACKENDS.check(name)
    if name == "auto":
        return "flex" if device.startswith("cuda") else "pieces"
    return name
