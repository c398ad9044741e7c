"""Loading models by name or directory, and the tiny models' behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_testkit import random_ids, random_model, run_step, small_configs

from penelope_engine.errors import ConfigError, UnknownNameError
from penelope_engine.model.hf_checkpoint import save_safetensors_dir
from penelope_engine.model.registry import LoadedModel, load_model, model_names, qwen3_tokenizer
from penelope_engine.tiers.kv_pool import KVPool

PROMPT = [{"role": "user", "content": "Tell me a story about a lighthouse."}]


def _greedy(lm: LoadedModel, steps: int) -> list[int]:
    prompt = lm.tokenizer.apply_chat_template(PROMPT)
    kv = KVPool(lm.config, 8, 16, lm.model.dtype)
    table = torch.arange(8)
    ids, out = prompt, []
    for _ in range(steps):
        n = len(prompt) + len(out)
        logits = run_step(
            lm.model, kv, [(ids, list(range(n - len(ids), n)), table, n)], all_logits=False
        )
        out.append(int(logits[-1].argmax()))
        ids = out[-1:]
    return out


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        load_model("no-such-model")
    for name in ("tiny-qwen3", "tiny-llama", "smollm2-135m"):
        assert name in str(err.value)
    assert model_names() == ("tiny-qwen3", "tiny-qwen3-64k", "tiny-llama", "smollm2-135m")


def test_bad_dtype_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="float32, float16, bfloat16"):
        load_model("tiny-qwen3", dtype="int8")


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama"])
def test_tiny_models_are_seeded_and_do_not_collapse(name: str) -> None:
    lm = load_model(name)
    assert lm.config.vocab_size == lm.tokenizer.vocab_size == 151669
    tokens = _greedy(lm, 16)
    assert len(set(tokens)) >= 8, lm.tokenizer.decode(tokens)
    again = load_model(name)
    assert torch.equal(again.model.lm_head.weight, lm.model.lm_head.weight)


def test_tiny_model_in_bfloat16() -> None:
    lm = load_model("tiny-qwen3", dtype="bfloat16")
    assert lm.model.dtype == torch.bfloat16
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight
    assert len(_greedy(lm, 3)) == 3


def test_directory_path_loads_model_and_tokenizer(tmp_path: Path) -> None:
    cfg = small_configs()[0]
    model = random_model(cfg, seed=4)
    save_safetensors_dir(model, tmp_path)
    qwen3_tokenizer().save(tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.config == cfg.__class__(**{**cfg.__dict__, "name": tmp_path.name})
    ids = random_ids(9, seed=1)
    steps = []
    for m in (model, lm.model):
        kv = KVPool(cfg, 4, 4, torch.float32)
        steps.append(run_step(m, kv, [(ids, list(range(9)), torch.arange(3), 9)]))
    assert torch.equal(steps[0], steps[1])
    assert lm.tokenizer.encode("hello there") == qwen3_tokenizer().encode("hello there")
