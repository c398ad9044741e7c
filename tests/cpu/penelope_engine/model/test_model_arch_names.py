"""The architecture names have one home (`config.Arch`); the HF class map and the loaders
follow it."""

from __future__ import annotations

import dataclasses

import pytest

from penelope_engine.config import ARCH_NAMES, ModelConfig
from penelope_engine.errors import ConfigError
from penelope_engine.model.gguf_loader import config_from_gguf
from penelope_engine.model.hf_checkpoint import ARCHITECTURES, config_from_hf
from penelope_engine.model.tiny import tiny_qwen3_config


def test_the_hf_class_map_names_exactly_the_configured_architectures() -> None:
    assert tuple(ARCHITECTURES) == ARCH_NAMES


def test_an_unknown_arch_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="llama, qwen3"):
        dataclasses.replace(tiny_qwen3_config(64), arch="mamba")  # type: ignore[arg-type]


def test_the_loaders_refuse_an_architecture_the_config_does_not_name() -> None:
    with pytest.raises(ConfigError, match="not supported"):
        config_from_hf({"model_type": "mistral"})
    with pytest.raises(ConfigError, match="llama or qwen3"):
        config_from_gguf({"general.architecture": "mistral"}, tied=False)


def test_every_architecture_builds_a_model_config() -> None:
    base = tiny_qwen3_config(64)
    for arch in ARCH_NAMES:
        assert isinstance(dataclasses.replace(base, arch=arch), ModelConfig)
