"""Reading Hugging Face config.json files and checkpoint directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_testkit import hf_reference, random_ids, random_model, run_step, small_configs
from safetensors.torch import load_file, save_file

from penelope_engine.errors import ConfigError
from penelope_engine.model.hf_checkpoint import config_from_hf, config_to_hf, load_safetensors_dir
from penelope_engine.tiers.kv_pool import KVPool

BASE = {
    "model_type": "llama",
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def test_config_defaults_and_both_rope_spellings() -> None:
    old = config_from_hf({**BASE, "rope_theta": 5e5})
    new = config_from_hf({**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})
    assert old == new
    assert (old.rope_theta, old.head_dim, old.num_kv_heads) == (5e5, 16, 4)
    assert config_from_hf(config_to_hf(old), name=old.name) == old


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"model_type": "mistral"}, "model_type 'mistral'"),
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope scaling 'llama3'"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_unsupported_configs_are_refused(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_hf({**BASE, **extra})


@pytest.mark.parametrize("cfg", small_configs(), ids=lambda c: c.arch)
def test_directory_saved_by_transformers_loads(cfg: object, tmp_path: Path) -> None:
    model = random_model(cfg, seed=3)  # type: ignore[arg-type]
    hf_reference(model).save_pretrained(tmp_path)
    loaded_cfg, loaded = load_safetensors_dir(tmp_path)
    assert loaded_cfg.tie_word_embeddings == model.config.tie_word_embeddings
    ids = random_ids(11, seed=2)
    logits = []
    for m in (model, loaded):
        kv = KVPool(m.config, 4, 4, torch.float32)
        logits.append(run_step(m, kv, [(ids, list(range(11)), torch.arange(3), 11)]))
    assert torch.equal(logits[0], logits[1])


def test_missing_and_misshapen_weights_are_reported(tmp_path: Path) -> None:
    model = random_model(small_configs()[1], seed=3)
    hf_reference(model).save_pretrained(tmp_path)
    shard = tmp_path / "model.safetensors"
    tensors = load_file(str(shard))
    del tensors["model.norm.weight"]
    save_file(tensors, str(shard))
    with pytest.raises(ConfigError, match="model.norm.weight"):
        load_safetensors_dir(tmp_path)
    tensors["model.norm.weight"] = torch.ones(3)
    save_file(tensors, str(shard))
    with pytest.raises(ConfigError, match="shape"):
        load_safetensors_dir(tmp_path)


def test_not_a_checkpoint_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no config.json"):
        load_safetensors_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    with pytest.raises(ConfigError, match="no \\*.safetensors"):
        load_safetensors_dir(tmp_path)
