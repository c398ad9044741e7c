"""SGLang's worker probes (`/server_info`, `/model_info`, `/get_*`), as sgl-router reads them.

sgl-router 0.3.2 deserializes the answers into `ServerInfo` and `ModelInfo`
(smg 4e108ef08, src/core/steps/worker/local/discover_metadata.rs:27-54); a field
of the wrong JSON type drops the whole answer, so the types are checked here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client
from fastapi import FastAPI

from cache_store import StoreStats
from deployments.api.app import create_app
from deployments.api.backend import ReplicaOutput
from deployments.api.settings import ApiSettings
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import EngineStats, GenerateRequest

pytestmark = pytest.mark.anyio

# The fields sgl-router declares, and the JSON types serde accepts for them.
ROUTER_SERVER_INFO = {
    "model": (str,),  # serde alias of model_id
    "model_id": (str,),
    "model_path": (str,),
    "served_model_name": (str,),
    "tp_size": (int,),
    "dp_size": (int,),
    "load_balance_method": (str,),
    "disaggregation_mode": (str,),
    "version": (str,),
    "max_batch_size": (int,),
    "max_total_tokens": (int,),
    "max_prefill_tokens": (int,),
    "max_running_requests": (int,),
    "max_num_reqs": (int,),
}
ROUTER_MODEL_INFO = {
    "model_path": (str,),
    "tokenizer_path": (str,),
    "is_generation": (bool,),
    "model_type": (str,),
    "architectures": (list,),
}


def parses_as(body: Mapping[str, Any], fields: Mapping[str, tuple[type, ...]]) -> bool:
    """Whether serde would accept ``body`` for the router's struct (null is `None`)."""
    for key, types in fields.items():
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in types:
            return False
        if not isinstance(value, types) or (isinstance(value, int) and value < 0):
            return False
    return True


async def test_server_info_has_the_engine_config(
    client: httpx.AsyncClient, tiny_qwen3: LoadedModel
) -> None:
    r = await client.get("/server_info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert parses_as(info, ROUTER_SERVER_INFO)
    models = (await client.get("/v1/models")).json()
    # the router's model id: served_model_name, else model_path (create_worker.rs:76-82)
    assert info["served_model_name"] == models["data"][0]["id"] == MODEL
    assert info["model_path"] == info["tokenizer_path"] == TINY_ENGINE.model
    cache, sched = TINY_ENGINE.cache, TINY_ENGINE.scheduler
    pool = cache.page_size * cache.device_pages
    window = min(tiny_qwen3.config.max_position, pool)  # the window served: what the pool holds
    assert info["context_length"] == window
    assert info["page_size"] == cache.page_size == 4
    assert (info["tp_size"], info["dp_size"], info["disaggregation_mode"]) == (1, 1, "null")
    assert info["max_running_requests"] == sched.max_running
    assert info["chunked_prefill_size"] == sched.prefill_chunk
    assert info["max_prefill_tokens"] == sched.max_batch_tokens
    assert info["max_total_tokens"] == info["max_total_num_tokens"] == pool
    assert info["max_req_input_len"] == min(window, pool) - 1
    assert info["is_embedding"] is False and info["dtype"] == TINY_ENGINE.dtype
    assert isinstance(info["version"], str)
    # the pool in bytes as well as tokens, at the KV dtype's width
    mc = tiny_qwen3.config
    per_token = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * 4  # float32: 4 bytes
    assert info["kv_bytes_per_token"] == per_token and info["weights"] == "float"
    assert info["max_total_kv_bytes"] == pool * per_token


async def test_model_info_says_what_model_runs(client: httpx.AsyncClient) -> None:
    r = await client.get("/model_info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert parses_as(info, ROUTER_MODEL_INFO)
    assert info["model_path"] == TINY_ENGINE.model and info["served_model_name"] == MODEL
    assert info["is_generation"] is True
    assert (info["model_type"], info["architectures"]) == ("qwen3", ["Qwen3ForCausalLM"])
    assert info["has_image_understanding"] is False


@pytest.mark.parametrize("name", ["server_info", "model_info"])
async def test_deprecated_get_paths_answer_the_same(client: httpx.AsyncClient, name: str) -> None:
    # http_server.py: /get_server_info and /get_model_info return the new paths' answers
    new, old = await client.get(f"/{name}"), await client.get(f"/get_{name}")
    assert old.status_code == 200 and old.json() == new.json()


async def test_probes_need_a_key_when_keys_are_set(make_app: Callable[..., FastAPI]) -> None:
    settings = ApiSettings(api_keys={"key-tenant-a-0001": "a"})
    async for client in open_client(make_app(settings)):
        for path in ("/server_info", "/model_info", "/get_server_info", "/get_model_info"):
            assert (await client.get(path)).status_code == 401
            auth = {"authorization": "Bearer key-tenant-a-0001"}  # the router's --api-key
            assert (await client.get(path, headers=auth)).status_code == 200


class RemoteBackend:
    """A backend with no engine in this process (as the Ray ingress's)."""

    model_name = "remote-model"
    max_model_len = 4096
    tokenizer: Any = None
    healthy = True

    async def generate(self, request: GenerateRequest) -> AsyncIterator[ReplicaOutput]:
        raise NotImplementedError
        yield  # pragma: no cover

    def replica_stats(self) -> Mapping[str, EngineStats]:
        return {}

    def store_stats(self) -> Mapping[str, StoreStats]:
        return {}

    async def close(self) -> None:
        return None


async def test_without_an_engine_in_process_only_name_and_window_are_known() -> None:
    async for client in open_client(create_app(RemoteBackend)):
        server = (await client.get("/server_info")).json()
        model = (await client.get("/model_info")).json()
    assert parses_as(server, ROUTER_SERVER_INFO) and parses_as(model, ROUTER_MODEL_INFO)
    assert server["model_path"] == server["served_model_name"] == "remote-model"
    assert (server["context_length"], server["max_req_input_len"]) == (4096, 4095)
    assert server["page_size"] is None and server["max_running_requests"] is None
    assert model["model_path"] == "remote-model" and model["is_generation"] is True
    assert model["model_type"] is None and model["architectures"] is None
