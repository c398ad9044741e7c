"""SGLang with the penelope radix cache on a GPU, against SGLang's default tree.

A small random-weight Qwen3 (`load_format="dummy"`, deterministic weights) serves
agent-like sessions (a shared prefix, then growing private histories) in a KV
pool far smaller than the sessions, so eviction runs on every turn. Two modes,
each run with SGLang's default tree and with `radix_cache_backend="penelope"`
under the same memory pressure:

- `radix`: no host tier (holes, refills);
- `hicache`: `enable_hierarchical_cache=True` (HiCache's host pool, twice the
  device pool): fronts go to the host and come back through the refill path.

Per mode: greedy tokens identical to the default's; at least as many prompt
tokens served from cache (device + host, a refill's recomputed tokens not
counted: `digests.usage_of`); and the TTFT ratio of returning turns (turn 2 on,
median, penelope / default, streamed: time to the first output token), printed
as JSON (`PENELOPE_TTFT ...`), not asserted.

Skipped without CUDA or SGLang. SGLang runs its scheduler in a subprocess, which
finds the plugin through the `sglang.srt.plugins` entry point: the test writes
that entry point into a temporary dist-info on PYTHONPATH, as an installed
package would declare it.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
sglang = pytest.importorskip("sglang")

ROOT = Path(__file__).resolve().parents[2]
QWEN3_TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 4096,
    "max_position_embeddings": 8192,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SESSIONS, TURNS, SHARED_LEN, TURN_LEN, NEW_TOKENS = 6, 4, 256, 160, 8
KV_TOKENS = 2048  # a third of what the sessions would need


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen3-tiny")
    (path / "config.json").write_text(json.dumps(QWEN3_TINY))
    return path


@pytest.fixture(scope="module", autouse=True)
def plugin_entry_point(tmp_path_factory: pytest.TempPathFactory) -> None:
    site = tmp_path_factory.mktemp("site")
    dist = site / "penelope_gpu_test-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: penelope-gpu-test\nVersion: 0.0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[sglang.srt.plugins]\npenelope = penelope_sglang.plugin:register\n"
    )
    paths = [str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


def run_workload(model_dir: Path, backend: str | None, hicache: bool) -> dict[str, Any]:
    """Every turn's greedy tokens, the prompt tokens served from cache, returning TTFTs."""
    from penelope_sglang.digests import usage_of
    from penelope_sglang.sessions import SessionHint

    kwargs: dict[str, Any] = {
        "model_path": str(model_dir),
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "max_total_tokens": KV_TOKENS,
        "page_size": 16,
        "random_seed": 0,
        "disable_cuda_graph": True,
        "mem_fraction_static": 0.3,
        "log_level": "error",
        "context_length": 4096,
        "incremental_streaming_output": True,
    }
    if backend is not None:
        kwargs["radix_cache_backend"] = backend
    if hicache:
        kwargs |= {"enable_hierarchical_cache": True, "hicache_ratio": 2.0}
    engine = sglang.Engine(**kwargs)
    rng = random.Random(0)
    shared = [rng.randrange(3, 4096) for _ in range(SHARED_LEN)]
    histories = [list(shared) for _ in range(SESSIONS)]
    outputs: list[list[int]] = []
    cached = 0
    ttfts: list[float] = []
    try:
        for turn in range(TURNS):
            for s in rng.sample(range(SESSIONS), SESSIONS):
                histories[s] += [rng.randrange(3, 4096) for _ in range(TURN_LEN)]
                rid = f"t{turn}-s{s}"
                hints = SessionHint(f"s{s}").envelope(rid) if backend == "penelope" else None
                start = time.perf_counter()
                first: float | None = None
                tokens: list[int] = []
                meta: dict[str, Any] = {}
                for chunk in engine.generate(
                    input_ids=histories[s],
                    sampling_params={
                        "max_new_tokens": NEW_TOKENS,
                        "temperature": 0.0,
                        "ignore_eos": True,
                    },
                    stream=True,
                    rid=rid,
                    kv_hints=hints,
                ):
                    new = list(chunk.get("output_ids") or ())
                    if new and first is None:
                        first = time.perf_counter() - start
                    tokens += new
                    meta = chunk.get("meta_info") or meta
                outputs.append(tokens)
                usage = usage_of(meta, len(tokens))
                cached += usage.device_tokens + usage.host_tokens
                if turn > 0 and first is not None:
                    ttfts.append(first)
                histories[s] += tokens
    finally:
        engine.shutdown()
    return {"outputs": outputs, "cached": cached, "ttfts": ttfts}


@pytest.mark.parametrize("hicache", [False, True], ids=["radix", "hicache"])
def test_penelope_backend_matches_the_default_and_caches_more(
    model_dir: Path, hicache: bool
) -> None:
    default = run_workload(model_dir, None, hicache)
    penelope = run_workload(model_dir, "penelope", hicache)
    name = "sglang-penelope" + ("-hicache" if hicache else "")
    identical = penelope["outputs"] == default["outputs"]
    median = {
        k: statistics.median(r["ttfts"]) for k, r in (("default", default), ("penelope", penelope))
    }
    print(
        "PENELOPE "
        + json.dumps(
            {
                "check": name,
                "identical": identical,
                "cached_tokens": {"default": default["cached"], "penelope": penelope["cached"]},
            }
        )
    )
    print(
        "PENELOPE_TTFT "
        + json.dumps(
            {
                "check": name,
                "returning_turns": len(penelope["ttfts"]),
                "median_ttft_s": {k: round(v, 5) for k, v in median.items()},
                "ttft_ratio": round(median["penelope"] / median["default"], 3),
            }
        )
    )
    assert identical
    assert all(len(t) == NEW_TOKENS for t in penelope["outputs"])
    assert penelope["cached"] >= default["cached"]
