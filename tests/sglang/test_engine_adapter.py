"""The `EngineProtocol` adapter over `sglang.Engine`: config, translation, streaming.

`sglang.Engine` serves on CUDA only, so `generate` is driven here by a stand-in
with `async_generate`'s streaming shape (incremental `output_ids` plus
`meta_info`); the GPU test (tests/gpu/test_sglang_penelope.py) runs the real one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sglang.srt.server_args import ServerArgs

from penelope_engine.errors import ConfigError
from penelope_engine.protocol import DrainReport, EngineProtocol, GenerateRequest, SamplingParams
from penelope_sglang import engine as adapter
from penelope_sglang.engine import (
    SGLangEngine,
    SGLangEngineConfig,
    finish_reason,
    sampling_dict,
    usage_of,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model_path": ""},
        {"page_size": 0},
        {"mem_fraction_static": 1.5},
        {"max_total_tokens": 8, "page_size": 16},
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SGLangEngineConfig(**{"model_path": "m", **kwargs})


def test_config_becomes_valid_sglang_server_args() -> None:
    kwargs = SGLangEngineConfig("dummy", load_format="dummy", max_total_tokens=4096).engine_kwargs()
    args = ServerArgs(**kwargs)
    assert args.radix_cache_backend == "penelope" and args.incremental_streaming_output
    assert args.max_total_tokens == 4096 and args.load_format == "dummy"


def test_translation_of_sampling_finish_and_usage() -> None:
    request = GenerateRequest(
        "r", (1, 2), SamplingParams(max_tokens=5, stop_token_ids=(7,), seed=3)
    )
    assert sampling_dict(request) == {
        "max_new_tokens": 5,
        "temperature": 0.0,
        "top_p": 1.0,
        "ignore_eos": False,
        "stop_token_ids": [7],
        "sampling_seed": 3,
    }
    assert finish_reason({"finish_reason": {"type": "length", "length": 5}}) == "length"
    assert finish_reason({"finish_reason": None}) is None
    usage = usage_of({"prompt_tokens": 40, "cached_tokens": 32}, 5)
    assert (usage.device_tokens, usage.new_tokens, usage.completion_tokens) == (32, 8, 5)
    assert usage.misses.as_dict() == {**dict.fromkeys(usage.misses.as_dict(), 0), "new": 8}


class StreamingEngine:
    """`async_generate(stream=True)`'s shape: one dict per step, new ids only."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def async_generate(self, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(kwargs)

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            meta = {"prompt_tokens": 3, "cached_tokens": 2, "finish_reason": None}
            yield {"output_ids": [11], "meta_info": meta}
            yield {"output_ids": [12, 13], "meta_info": {**meta, "finish_reason": {"type": "stop"}}}

        return chunks()


def test_generate_streams_new_tokens_and_finishes_once() -> None:
    engine = object.__new__(SGLangEngine)
    engine.model_name, engine._engine = "m", StreamingEngine()
    engine._prompt_tokens = engine._cached_tokens = engine._running = 0
    engine._host_tokens = engine._evicted_tokens = 0
    request = GenerateRequest("req-1", (5, 6, 7), tenant="acme")

    async def collect() -> list[Any]:
        return [out async for out in engine.generate(request)]

    outs = asyncio.run(collect())
    assert [o.token_ids for o in outs] == [(11,), (12, 13)]
    assert [o.finished for o in outs] == [False, True] and outs[-1].finish_reason == "stop"
    assert outs[-1].usage.completion_tokens == 3 and outs[0].ttft_s is not None
    call = engine._engine.calls[0]
    assert call["input_ids"] == [5, 6, 7] and call["cache_salt"] == "acme" and call["stream"]
    stats = engine.stats()
    assert (stats.tokens.device_tokens, stats.tokens.new_tokens, stats.running) == (2, 1, 0)


def test_the_adapter_answers_every_member_of_the_engine_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"max_position_embeddings": 4096, "vocab_size": 1000})
    )
    monkeypatch.setattr(adapter, "register", lambda: None)
    monkeypatch.setattr(adapter.sglang, "Engine", lambda **_: StreamingEngine())
    monkeypatch.setattr(adapter.Tokenizer, "from_dir", staticmethod(lambda _: object()))
    engine = SGLangEngine(SGLangEngineConfig(str(tmp_path)))
    members = [n for n in vars(EngineProtocol) if not n.startswith("_")]
    assert [n for n in members if not hasattr(engine, n)] == []
    assert (engine.max_model_len, engine.vocab_size, engine.alive) == (4096, 1000, True)
    assert engine.store_stats() is None and engine.drain_to_store() == DrainReport()
    assert engine.session_digests() == [] and engine.shared_prefix_hashes() == []
    engine.check_integrity()  # SGLang checks its own pools


def test_importing_the_adapter_without_sglang_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['sglang'] = None\n"
        "try:\n    import penelope_sglang.engine\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "pip install sglang==0.5.23" in out and "CUDA" in out


def test_the_plugin_hooks_apply_to_sglangs_scheduler() -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests/sglang/stubs')\n"
        "from sglang.srt.managers.scheduler import Scheduler\n"
        "from sglang.srt.plugins.hook_registry import HookRegistry\n"
        "from penelope_sglang import plugin\n"
        "before = {'fn': Scheduler._add_request_to_queue}\n"  # apply_hooks rebinds globals
        "plugin.register(); HookRegistry.apply_hooks()\n"
        "assert Scheduler._add_request_to_queue is not before['fn']\n"
        "print('patched')\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "patched" in out
