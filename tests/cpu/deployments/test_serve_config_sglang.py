"""`engine: sglang` in serve_config.yaml: parsed anywhere, built only where SGLang runs."""

import pytest

from deployments.ray.serve_config import parse_serve_config
from penelope_engine.errors import ConfigError
from penelope_sglang.config import SGLangEngineConfig


def test_engine_sglang_selects_the_sglang_settings() -> None:
    config = parse_serve_config(
        {"engine": "sglang", "sglang": {"model_path": "/models/qwen3-8b", "page_size": 32}}
    )
    assert config.replica_engine == SGLangEngineConfig("/models/qwen3-8b", page_size=32)
    assert config.replica_engine.radix_cache_backend == "penelope"


def test_engine_sglang_without_its_section_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="sglang"):
        parse_serve_config({"engine": "sglang"})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_serve_config({"engine": "sglang", "sglang": {"model_path": "m", "nope": 1}})


def test_the_default_engine_is_the_torch_engine() -> None:
    from penelope_engine.config import EngineConfig

    assert isinstance(parse_serve_config({}).replica_engine, EngineConfig)


def test_building_an_sglang_replica_without_sglang_says_how_to_install_it() -> None:
    pytest.importorskip("ray")
    from deployments.ray.engine_replica import _sglang_engine

    try:
        import sglang  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="sglang"):
            _sglang_engine(SGLangEngineConfig("/models/qwen3-8b"))
    else:  # pragma: no cover - a machine with SGLang
        pytest.skip("SGLang is installed here; the GPU tests cover the real build")


def test_the_yaml_section_validates_into_the_adapters_one_config() -> None:
    section = {"model_path": "/m", "mem_fraction_static": 0.8, "random_seed": 7}
    config = parse_serve_config({"engine": "sglang", "sglang": section})
    assert config.replica_engine == SGLangEngineConfig(**section)
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        parse_serve_config(
            {"engine": "sglang", "sglang": {"model_path": "/m", "mem_fraction_static": 1.5}}
        )
    with pytest.raises(ConfigError, match="page_size"):
        parse_serve_config({"engine": "sglang", "sglang": {"model_path": "/m", "page_size": "x"}})
