"""`weight_formats.QuantizedLinear` and `Decoder.use_weights("int8" | "int4")`: decode rows read
the packed weights, prefill rows run the model dtype over the values those weights stand for,
and a row's value does not depend on the rows beside it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from model_testkit import random_model, small_configs

from penelope_engine.config import EngineConfig
from penelope_engine.errors import ConfigError, UnknownNameError
from penelope_engine.model.registry import load_model
from penelope_engine.model.weight_formats import Int4Codec, Int8Codec, QuantizedLinear

CODECS = [Int8Codec(), Int4Codec()]


def _weight(out: int = 96, inp: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(out, inp, generator=torch.Generator().manual_seed(0)).to(dtype)


def test_quantize_rounds_each_row_to_127_steps_of_its_scale_in_place() -> None:
    w = _weight()
    original = w.clone()
    view = w[:10]  # a projection inside a fused weight
    lin = QuantizedLinear(Int8Codec())
    lin.quantize(w)
    packed = lin._packed
    assert packed is not None
    assert packed.data.dtype == torch.int8 and int(packed.data.abs().max()) <= 127
    steps = packed.scales.float().unsqueeze(1)
    assert torch.equal(w, packed.data.float() * steps)  # exact in float32
    assert torch.equal(view, w[:10])  # the view sees the rounded values
    assert bool(((w - original).abs() <= steps / 2 + 1e-6).all())  # half a step at most
    assert float((w - original).abs().max()) > 0  # it did round


def test_int4_rounds_each_group_of_32_onto_16_levels_from_its_min_to_its_max() -> None:
    w = _weight(32, 128)
    original = w.clone()
    QuantizedLinear(Int4Codec()).quantize(w)
    groups, before = w.view(32, 4, 32), original.view(32, 4, 32)
    low, high = before.amin(dim=2, keepdim=True), before.amax(dim=2, keepdim=True)
    step = (high - low) / 15
    assert all(len(g.unique()) <= 16 for g in groups.reshape(-1, 32))
    assert bool(((groups - before).abs() <= step * 0.55).all())  # half a level, bf16 scales
    # a group already on 16 even levels (GGUF Q4_1's, as SmolLM2 ships) keeps them
    levels = torch.arange(16.0).repeat(2) * 0.125 - 1.0
    exact = levels.repeat(16, 4)
    QuantizedLinear(Int4Codec()).quantize(exact)
    assert torch.equal(exact, levels.repeat(16, 4))


def test_int4_refuses_a_shape_its_kernel_cannot_pack() -> None:
    with pytest.raises(ValueError, match=r"divisible by 32 .* \[16, 48\]"):
        QuantizedLinear(Int4Codec()).quantize(_weight(16, 48))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_prefill_rows_are_the_model_dtype_product_over_the_rounded_weights(codec: Any) -> None:
    w = _weight()
    lin = QuantizedLinear(codec)
    lin.quantize(w)
    x = torch.randn(40, 64)
    assert torch.equal(lin(x, w, decode=False), F.linear(x, w))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decode_rows_read_the_packed_weights_and_agree_to_bf16_rounding(codec: Any) -> None:
    w = _weight()
    lin = QuantizedLinear(codec)
    lin.quantize(w)
    x = torch.randn(8, 64)
    got = lin(x, w, decode=True)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, F.linear(x, w), atol=0.15, rtol=0.02)  # bf16 inputs


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("decode", [True, False])
def test_a_row_is_the_same_whatever_the_rows_beside_it(decode: bool, codec: Any) -> None:
    w = _weight(160, 96)
    lin = QuantizedLinear(codec)
    lin.quantize(w)
    x = torch.randn(70, 96)
    whole = lin(x, w, decode)
    for start, rows in ((0, 2), (3, 5), (9, 8), (20, 33), (69, 1)):
        if rows < 5 and not decode:
            continue  # below 5 rows MKL's float32 product takes other kernels (as for float)
        assert torch.equal(lin(x[start : start + rows], w, decode), whole[start : start + rows])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_weight_changed_after_quantization_is_refused(codec: Any) -> None:
    w = _weight()
    lin = QuantizedLinear(codec)
    lin.quantize(w)
    w.mul_(2.0)
    with pytest.raises(RuntimeError, match="use_weights"):
        lin(torch.randn(2, 64), w, decode=True)


@pytest.mark.parametrize("name", ["int8", "int4"])
@pytest.mark.parametrize("cfg", small_configs(), ids=lambda c: c.arch)
def test_use_weights_quantizes_every_product_and_keeps_the_embedding_tied(
    cfg: Any, name: str
) -> None:
    model = random_model(cfg).use_weights(name)
    assert model.weights == name
    products = model.products()
    assert all(isinstance(m.gemm, QuantizedLinear) and m.gemm.name == name for m in products)
    model.prepare_decode()  # every product's copy is current
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    layer = model.model.layers[0]
    q = layer.self_attn.q_proj.weight
    assert q.data_ptr() == layer.self_attn.qkv.data_ptr()  # still a view of the fused qkv
    with pytest.raises(UnknownNameError, match="float, int8, int4"):
        random_model(cfg).use_weights("int2")


def test_engine_config_checks_the_weights_name_and_device() -> None:
    with pytest.raises(ConfigError, match="weights must be one of float, int8, int4"):
        EngineConfig(weights="int2")  # type: ignore[arg-type]
    for name in ("int8", "int4"):
        with pytest.raises(ConfigError, match=f"weights {name} runs on the CPU only"):
            EngineConfig(weights=name, device="cuda")  # type: ignore[arg-type]
    EngineConfig(weights="int8", dtype="bfloat16")


def test_an_engine_refuses_a_model_whose_weights_differ_from_its_config() -> None:
    from penelope_engine.engine import Engine

    loaded = load_model("tiny-qwen3")
    with pytest.raises(ConfigError, match="holds float weights, the config int8"):
        Engine(EngineConfig(model="tiny-qwen3", weights="int8"), loaded)


def test_a_cpu_without_the_vectorized_int8_loop_is_told_so(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from penelope_engine.model import decoder

    monkeypatch.setattr(decoder, "vectorized", lambda: False)
    with caplog.at_level("WARNING", logger=decoder.__name__):
        random_model(small_configs()[0]).use_weights("int8")
    assert "int8 weights" in caplog.text and "scalar loop, slower than float32" in caplog.text


def test_a_half_dtype_this_cpu_only_emulates_is_told_so(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from penelope_engine.model import registry

    monkeypatch.setattr(registry, "compute_dtype", lambda dtype, device: torch.float32)
    with caplog.at_level("WARNING", logger=registry.__name__):
        load_model("tiny-qwen3", "bfloat16")
    assert "emulated on this CPU" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=registry.__name__):
        load_model("tiny-qwen3", "float32")
    assert "emulated" not in caplog.text
