"""SGLang's metadata probes, so that sgl-router can put Penelope workers behind it.

sgl-router (sglang-router 0.3.2, the SGLang Model Gateway) registers an HTTP
worker by GETting ``/server_info`` and ``/model_info``, and ``/get_server_info``
and ``/get_model_info`` when those answer 404
(``src/core/steps/worker/local/discover_metadata.rs``). From ``/server_info``
it keeps ``model_path``, ``served_model_name``, ``tp_size``, ``dp_size``,
``load_balance_method`` and ``disaggregation_mode`` as the worker's labels and
parses ``version`` and the ``max_*`` capacities; from ``/model_info``
``model_type`` and ``architectures``. The worker's model id is
``served_model_name``, else ``model_path``. A field of the wrong JSON type makes
it drop the whole answer, so integers stay integers.

SGLang 0.5.23 (``sglang/srt/entrypoints/http_server.py``) answers
``/server_info`` with its resolved server arguments plus the scheduler's
``max_total_num_tokens`` and ``max_req_input_len`` and its ``version``, and
``/model_info`` with the model's path, names and kind; the ``get_`` paths are
deprecated aliases. Here each answers the fields of those that apply to one
Penelope engine, from its config: one process (``tp_size`` = ``dp_size`` = 1),
no prefill/decode split (``disaggregation_mode`` "null"), a generation model.
A backend without an in-process engine (the Ray ingress) knows only the model
name and window; the engine-config fields are then null. Like ``/v1/models``,
the probes need an API key when keys are configured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI
from fastapi.params import Depends

from deployments.api.backend import Backend
from penelope_engine.config import EngineConfig, ModelConfig

try:
    PENELOPE_VERSION = version("penelope")
except PackageNotFoundError:  # run from a source tree that is not installed
    PENELOPE_VERSION = "unknown"


def _engine_config(backend: Backend) -> EngineConfig | None:
    """The in-process engine's config (`LocalBackend.engine.config`), if there is one."""
    config = getattr(getattr(backend, "engine", None), "config", None)
    return config if isinstance(config, EngineConfig) else None


def _model_config(backend: Backend) -> ModelConfig | None:
    """The loaded model's architecture config, if the engine runs in this process."""
    engine = getattr(getattr(backend, "engine", None), "engine", None)
    config = getattr(engine, "model_config", None)
    return config if isinstance(config, ModelConfig) else None


def server_info(backend: Backend) -> dict[str, Any]:
    """SGLang's ``/server_info`` fields that a Penelope engine has."""
    cfg = _engine_config(backend)
    window = backend.max_model_len
    info: dict[str, Any] = {
        "model_path": cfg.model if cfg is not None else backend.model_name,
        "tokenizer_path": cfg.model if cfg is not None else backend.model_name,
        "served_model_name": backend.model_name,
        "context_length": window,
        "is_embedding": False,
        "tp_size": 1,
        "dp_size": 1,
        "disaggregation_mode": "null",
        "page_size": None,
        "dtype": None,
        "device": None,
        "random_seed": None,
        "max_running_requests": None,
        "max_prefill_tokens": None,
        "chunked_prefill_size": None,
        "max_total_tokens": None,
        "max_total_num_tokens": None,
        "max_req_input_len": window - 1,
        "version": PENELOPE_VERSION,
        # Penelope's own: the weight format and the device pool in bytes as well as tokens
        "weights": None,
        "kv_bytes_per_token": None,
        "max_total_kv_bytes": None,
    }
    if cfg is not None:
        pool = cfg.cache.page_size * cfg.cache.device_pages  # tokens the device pool holds
        info.update(
            page_size=cfg.cache.page_size,
            dtype=cfg.dtype,
            device=cfg.device,
            random_seed=cfg.seed,
            max_running_requests=cfg.scheduler.max_running,
            max_prefill_tokens=cfg.scheduler.max_batch_tokens,
            chunked_prefill_size=cfg.scheduler.prefill_chunk,
            max_total_tokens=pool,
            max_total_num_tokens=pool,
            max_req_input_len=min(window, pool) - 1,  # one token of room to generate
            weights=cfg.weights,
        )
        model = _model_config(backend)
        if model is not None:
            from penelope_engine.device_memory import kv_bytes_per_token  # torch is loaded here

            per_token = kv_bytes_per_token(cfg, model)
            info.update(kv_bytes_per_token=per_token, max_total_kv_bytes=pool * per_token)
    return info


def model_info(backend: Backend) -> dict[str, Any]:
    """SGLang's ``/model_info`` fields that a Penelope engine has."""
    cfg = _engine_config(backend)
    path = cfg.model if cfg is not None else backend.model_name
    model = _model_config(backend)
    architectures = None
    if model is not None:
        from penelope_engine.model.hf_checkpoint import ARCHITECTURES  # torch is loaded here

        architectures = [ARCHITECTURES[model.arch]]
    return {
        "model_path": path,
        "served_model_name": backend.model_name,
        "tokenizer_path": path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": model.arch if model is not None else None,
        "architectures": architectures,
    }


def add_sglang_probes(
    app: FastAPI, ready_backend: Callable[[], Backend], dependencies: Sequence[Depends] = ()
) -> None:
    """Add ``/server_info``, ``/model_info`` and their deprecated ``/get_`` aliases."""

    def route(answer: Callable[[Backend], dict[str, Any]]) -> Callable[[], Any]:
        async def probe() -> dict[str, Any]:
            return answer(ready_backend())

        return probe

    for path, answer in (
        ("/server_info", server_info),
        ("/get_server_info", server_info),
        ("/model_info", model_info),
        ("/get_model_info", model_info),
    ):
        app.add_api_route(path, route(answer), methods=["GET"], dependencies=list(dependencies))
