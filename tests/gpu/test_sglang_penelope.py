"""SGLang with the penelope radix cache on a GPU: same greedy outputs as SGLang's default tree.

A small random-weight Qwen3 (`load_format="dummy"`, deterministic weights) serves
agent-like sessions (a shared prefix, then growing private histories) in a KV
pool far smaller than the sessions, so eviction runs on every turn. Both runs
must produce identical greedy tokens; the run with holes prints its reused
(cached) prompt tokens against the default's.

Skipped without CUDA or SGLang. SGLang runs its scheduler in a subprocess, which
finds the plugin through the `sglang.srt.plugins` entry point: the test writes
that entry point into a temporary dist-info on PYTHONPATH, as an installed
package would declare it.
"""

from __future__ import annotations

import json
import os
import random
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
        "[sglang.srt.plugins]\npenelope = penelope_engine.sglang.plugin:register\n"
    )
    paths = [str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


def run_workload(model_dir: Path, backend: str | None) -> tuple[list[list[int]], int]:
    """Every turn's greedy tokens, and the prompt tokens SGLang served from its cache."""
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
    }
    if backend is not None:
        kwargs["radix_cache_backend"] = backend
    engine = sglang.Engine(**kwargs)
    rng = random.Random(0)
    shared = [rng.randrange(3, 4096) for _ in range(SHARED_LEN)]
    histories = [list(shared) for _ in range(SESSIONS)]
    outputs: list[list[int]] = []
    cached = 0
    try:
        for _ in range(TURNS):
            for s in rng.sample(range(SESSIONS), SESSIONS):
                histories[s] += [rng.randrange(3, 4096) for _ in range(TURN_LEN)]
                out = engine.generate(
                    input_ids=histories[s],
                    sampling_params={
                        "max_new_tokens": NEW_TOKENS,
                        "temperature": 0.0,
                        "ignore_eos": True,
                    },
                )
                tokens = list(out["output_ids"])
                outputs.append(tokens)
                cached += int(out["meta_info"].get("cached_tokens", 0))
                histories[s] += tokens
    finally:
        engine.shutdown()
    return outputs, cached


def test_penelope_backend_matches_the_default_greedy_outputs(model_dir: Path) -> None:
    default_out, default_cached = run_workload(model_dir, None)
    penelope_out, penelope_cached = run_workload(model_dir, "penelope")
    print(f"cached prompt tokens: default {default_cached}, penelope {penelope_cached}")
    assert penelope_out == default_out
    assert all(len(t) == NEW_TOKENS for t in penelope_out)
