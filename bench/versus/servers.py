"""The servers of a run: started cold by their `--start` command (or already up), stopped
after, and asked what KV capacity they really got.

A started server runs in its own process group (its shell command's whole
tree), logs to a file in the run's directory and must answer `/health`
within the deadline. Capacity is read back over HTTP where the server says
it, else from its log:

* Penelope: `/server_info`'s `max_total_num_tokens` (device pages x page size,
  `deployments.api.sglang_probes`), as SGLang reports it.
* vLLM: `/metrics`' `vllm:cache_config_info` labels (`num_gpu_blocks` x
  `block_size`; on the CPU build `num_gpu_blocks` counts the CPU KV blocks),
  else its log's "KV cache size: N tokens" line.
* llama-server: its log's ``llama_kv_cache: size = ... (N cells, ...)`` line
  (printed at log verbosity 4, which `scripts/llama_server_env.sh` sets): with
  ``--kv-unified`` the slots share those N cells. Its `/props` and `/slots`
  give only each slot's cap (``n_ctx`` per slot, itself capped at the model's
  training context), not the pool.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.child import StartFailed, server_process
from bench.net import wait_http
from bench.versus.config import ServerSpec

_VLLM_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_LOG_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
_LOG_BLOCKS = re.compile(r"#\s*(?:cpu|gpu) blocks:\s*(\d+)", re.I)
_LLAMA_CELLS = re.compile(r"llama_kv_cache: size =[^(]*\(\s*(\d+) cells")


def _answers(url: str) -> bool:
    """Whether something already accepts TCP connections at `url`'s host and port."""
    u = urlsplit(url)
    try:
        with socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=1.0):
            return True
    except OSError:
        return False


@contextmanager
def running(
    spec: ServerSpec, kv_tokens: int, block_tokens: int, log: Path, timeout_s: float
) -> Iterator[Path | None]:
    """`spec` up for the block: started by its command (yields its log) or already up."""
    if not spec.start:
        wait_http(f"{spec.url}/health", timeout_s)
        yield None
        return
    if _answers(spec.url):
        # Without this check /health would be answered by whoever holds the port, and
        # the replay would run against a stranger (another bench's server did that once).
        raise StartFailed(f"{spec.url} is taken before {spec.name} was started: another "
                          "process listens on that port")  # fmt: skip
    command = spec.command(kv_tokens, block_tokens)
    health = f"{spec.url}/health"
    with server_process(spec.name, command, log, health, timeout_s, shell=True, grace_s=15.0):
        yield log


def version(spec: ServerSpec) -> str:
    """What the server says it is: its install's version file, vLLM's `/version`,
    llama-server's `/props` build, or Penelope's `/server_info`; "" when none answers."""
    if found := spec.version():
        return found
    for path, key in (
        ("/version", "version"),
        ("/props", "build_info"),
        ("/server_info", "version"),
    ):
        try:
            r = httpx.get(f"{spec.url}{path}", timeout=5)
            if r.status_code == 200 and isinstance(r.json(), dict) and r.json().get(key):
                return str(r.json()[key])
        except (httpx.HTTPError, ValueError):
            continue
    return ""


def kv_capacity(url: str, log: Path | None) -> dict[str, Any]:
    """The KV capacity the server really got: tokens, blocks, block size, and where from."""
    try:
        info = httpx.get(f"{url}/server_info", timeout=10)
        if info.status_code == 200 and info.json().get("max_total_num_tokens"):
            d = info.json()
            return {
                "tokens": int(d["max_total_num_tokens"]),
                "block_tokens": d.get("page_size"),
                "blocks": int(d["max_total_num_tokens"]) // int(d.get("page_size") or 1),
                "source": "/server_info max_total_num_tokens",
            }
    except (httpx.HTTPError, ValueError):
        pass
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
    except httpx.HTTPError:
        text = ""
    return vllm_metrics_capacity(text) or log_capacity(log)


def vllm_metrics_capacity(text: str) -> dict[str, Any] | None:
    """From vLLM's `/metrics` text: its `vllm:cache_config_info` gauge's labels."""
    m = _VLLM_INFO.search(text)
    if not m:
        return None
    labels = dict(_LABEL.findall(m.group("labels")))
    blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
    if not blocks or blocks == "None" or not size:
        return None
    return {
        "tokens": int(blocks) * int(size),
        "block_tokens": int(size),
        "blocks": int(blocks),
        "source": "/metrics vllm:cache_config_info",
    }


def log_capacity(log: Path | None) -> dict[str, Any]:
    text = log.read_text(errors="replace") if log is not None and log.exists() else ""
    tokens = _LOG_TOKENS.findall(text)
    blocks = _LOG_BLOCKS.findall(text)
    if tokens:
        return {
            "tokens": int(tokens[-1].replace(",", "")),
            "blocks": int(blocks[-1]) if blocks else None,
            "source": "log: KV cache size",
        }
    cells = _LLAMA_CELLS.findall(text)
    if cells:
        return {"tokens": int(cells[-1]), "blocks": None, "source": "log: llama_kv_cache cells"}
    return {"tokens": None, "source": "not reported"}
