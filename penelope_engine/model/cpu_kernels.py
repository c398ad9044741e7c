"""The CPU's paged decode kernel: built from C at first use, called through ctypes.

`paged_decode(q, k_cache, v_cache, pages, lens)` runs a decode step's attention
straight over the pool (`kernels/paged_decode.c`): each key and value row is
read once where it lives, where the SDPA path first copies every sequence's
context out of the pool and reads the copy. On the AMD EPYC (AVX2, 1 thread)
of docs/results.md, 8 sequences at 6K tokens: the SDPA path 25 ms a layer
(8 of them the copy), the kernel a fraction of that (the figure is there).

Built once per machine with the C compiler found (`$CC`, `gcc` or `cc`),
`-O3 -march=native -fopenmp`, into `$PENELOPE_KERNEL_DIR` (default
`~/.cache/penelope/kernels`), named by a hash of the source, the flags and
this CPU's flags, so a copy built for another CPU is never loaded. Its
OpenMP runtime is the one torch has loaded (same soname), and it runs on
torch's thread count. Without a compiler, or with `PENELOPE_CPU_KERNELS=0`,
`available()` is False, says why (`why_not`), and attention keeps the SDPA
path, which stays the reference the kernel is tested against.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels") / "paged_decode.c"
# no -ffast-math: IEEE results, but no errno or traps, so exp's branches become vector blends
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp", "-shared",
         "-fPIC", "-std=gnu11")  # fmt: skip
LANES, MAX_HEADS, MAX_DIM, MAX_PAGE = 8, 64, 256, 256  # as the C source's #defines
BUILD_TIMEOUT_S = 120.0

_lock = threading.Lock()
_state: dict[str, object] = {}


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line for line in text.splitlines() if line.startswith("flags")), "")


def _kernel_dir() -> Path:
    env = os.environ.get("PENELOPE_KERNEL_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "penelope" / "kernels"


def _build() -> ctypes.CDLL:
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise RuntimeError("no C compiler (set CC, or install gcc)")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + repr((compiler, FLAGS, _cpu_flags())).encode()).hexdigest()
    target = _kernel_dir() / f"paged_decode-{key[:20]}.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # build beside the target, then rename: processes building at once never load half
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        try:
            done = subprocess.run(
                [compiler, *FLAGS, str(SOURCE), "-o", tmp],
                capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-600:]}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    lib = ctypes.CDLL(str(target))
    fn = lib.penelope_paged_decode_f32
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn.argtypes = [ptr, ptr, ptr, ptr, i64, ptr, i64, i64, i64, i64, i64,
                   ctypes.c_float, ptr, ctypes.c_int]  # fmt: skip
    fn.restype = None
    return lib


def _library() -> ctypes.CDLL | None:
    if "lib" in _state or "why" in _state:  # decided: every later call (each layer) reads it
        return _state.get("lib")  # type: ignore[return-value]
    with _lock:
        if "lib" in _state or "why" in _state:
            return _state.get("lib")  # type: ignore[return-value]
        if os.environ.get("PENELOPE_CPU_KERNELS", "1") == "0":
            _state["why"] = "PENELOPE_CPU_KERNELS=0"
            return None
        try:
            _state["lib"] = _build()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _state["why"] = str(exc)
            log.warning("the CPU decode kernel is not built (%s): decode uses SDPA", exc)
            return None
        return _state["lib"]  # type: ignore[return-value]


def available() -> bool:
    """Whether the kernel is built and loaded here (building it now if need be)."""
    return _library() is not None


def why_not() -> str:
    """Why `available()` is False ('' when it is True)."""
    _library()
    return str(_state.get("why", ""))


def fits(q: torch.Tensor, k_cache: torch.Tensor, page_size: int) -> bool:
    """Whether the kernel takes these shapes and dtypes (otherwise: SDPA)."""
    heads, dim = q.shape[-2], q.shape[-1]
    kv_heads = k_cache.shape[1]
    return (
        q.device.type == "cpu"
        and q.dtype == k_cache.dtype == torch.float32
        and dim % LANES == 0
        and dim <= MAX_DIM
        and heads % kv_heads == 0
        and heads <= MAX_HEADS
        and page_size <= MAX_PAGE
    )


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pages: torch.Tensor,
    lens: torch.Tensor,
    page_size: int,
) -> torch.Tensor:
    """``[B, H, D]`` attention of one query per sequence (`q` ``[B, H, D]``) over keys
    ``0 .. lens[b]-1`` held in `pages` ``[B, P]`` of the pools ``[slots, Hkv, D]``."""
    lib = _library()
    if lib is None:
        raise RuntimeError(f"the CPU decode kernel is not available: {why_not()}")
    q = q.contiguous()
    batch, heads, dim = q.shape
    pages = pages.to(torch.int64).contiguous()
    lens = lens.to(torch.int64).contiguous()
    if pages.shape[0] != batch or lens.shape != (batch,):
        raise ValueError(f"pages {tuple(pages.shape)} and lens {tuple(lens.shape)} for {batch}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("the KV pools must be contiguous")
    out = torch.empty_like(q)
    lib.penelope_paged_decode_f32(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), pages.data_ptr(),
        int(pages.shape[1]), lens.data_ptr(), batch, heads, int(k_cache.shape[1]), dim,
        page_size, dim**-0.5, out.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return out
