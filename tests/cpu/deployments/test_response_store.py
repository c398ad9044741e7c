"""Stored responses: bounded per tenant (bytes, then oldest first; a TTL), private to their
tenant, shared by every process on the same store (a local path or S3) and kept over a
restart, and a store that fails costs a later `previous_response_id` a clear 400, never the
reply itself nor a 5xx."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploy_testkit import MODEL, open_client
from fastapi import FastAPI

from cache_store import StoreLocation
from deployments.api.responses_api.store import ResponseStore, StoredResponse
from deployments.api.settings import ApiSettings

DAY = 86400.0


def record(text: str = "x", created_at: float = 0.0) -> StoredResponse:
    rid = f"resp_{uuid.uuid4().hex}"
    item = {"type": "message", "role": "user", "content": text}
    response = {"id": rid, "object": "response", "created_at": created_at, "output": []}
    return StoredResponse(rid, "s1", [item], response)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_tenant_keeps_its_newest_records_within_its_byte_budget(tmp_path: Path) -> None:
    one = record("a" * 1000, time.time()).encode().nbytes
    store = ResponseStore(StoreLocation(str(tmp_path)), budget_bytes=4 * one + one // 2, ttl_s=DAY)
    written = []
    for _ in range(7):
        r = record("a" * 1000, time.time())
        assert store.put("team-a", r)
        written.append(r)
        time.sleep(0.01)  # distinct modification times: "oldest" is well defined
    kept = [r for r in written if store.get("team-a", r.id) is not None]
    assert kept == written[-len(kept) :] and 3 <= len(kept) <= 4  # the newest, in order
    assert store.stats.ops["evicted"] == 7 - len(kept)
    assert store.stats.bytes_by_tenant["team-a"] <= store.budget_bytes
    assert store.put("team-b", record("b", time.time()))  # another tenant's own budget
    assert store.get("team-a", written[-1].id) is not None
    huge = record("z" * (8 * one), time.time())
    assert not store.put("team-a", huge) and store.stats.ops["rejected"] == 1


def test_records_expire_after_the_ttl_and_are_swept_by_the_next_write(tmp_path: Path) -> None:
    store = ResponseStore(StoreLocation(str(tmp_path)), 1 << 20, ttl_s=1.0)
    old = record("old", time.time())
    assert store.put("t", old) and store.get("t", old.id) is not None
    time.sleep(1.2)
    assert store.get("t", old.id) is None  # expired: a miss before any sweep
    assert store.put("t", record("new", time.time()))
    assert store.stats.ops["expired"] == 1 and store.stats.objects_by_tenant["t"] == 1


def test_another_tenant_cannot_read_or_delete_a_record(tmp_path: Path) -> None:
    store = ResponseStore(StoreLocation(str(tmp_path)), 1 << 20, DAY, clock=Clock(0.0))
    mine = record()
    assert store.put("a", mine)
    assert store.get("b", mine.id) is None and not store.delete("b", mine.id)
    assert store.get("a", mine.id) is not None
    assert store.get("a", "../" + mine.id) is None and store.get("a", "resp_nothex") is None
    assert store.delete("a", mine.id) and store.get("a", mine.id) is None


def test_every_process_on_the_store_reads_what_another_wrote_and_after_a_restart(
    tmp_path: Path,
) -> None:
    where = StoreLocation(str(tmp_path))
    one, two = (ResponseStore(where, 1 << 20, DAY, clock=Clock(0.0)) for _ in range(2))
    r = record("shared")
    assert one.put("t", r)
    got = two.get("t", r.id)
    assert got is not None and got.items == r.items and got.session == "s1"
    restarted = ResponseStore(where, 1 << 20, DAY, clock=Clock(0.0))
    assert restarted.get("t", r.id) is not None


@pytest.mark.timeout(120)
def test_records_live_on_s3_too(s3_store: StoreLocation) -> None:
    one, two = (ResponseStore(s3_store, 1 << 20, DAY, clock=Clock(0.0)) for _ in range(2))
    r = record("on s3")
    assert one.put("t", r)
    assert two.get("t", r.id) is not None and two.get("u", r.id) is None
    assert two.delete("t", r.id) and one.get("t", r.id) is None


def test_without_a_store_uri_records_live_in_this_process() -> None:
    store = ResponseStore(None, 1 << 20, DAY, clock=Clock(0.0))
    r = record()
    assert store.put("t", r) and store.get("t", r.id) is not None


# Through HTTP: a store that cannot be written.


@pytest.fixture
async def broken(
    make_app: Callable[..., FastAPI], tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's directory should be")
    settings = ApiSettings(responses_store_uri=str(blocker / "store"))
    async for c in open_client(make_app(settings)):
        yield c


@pytest.mark.anyio
async def test_a_failing_store_keeps_the_reply_and_makes_the_chain_a_clear_400(
    broken: httpx.AsyncClient,
) -> None:
    body: dict[str, Any] = {"model": MODEL, "input": "hi", "max_output_tokens": 2}
    first = await broken.post("/v1/responses", json=body)
    assert first.status_code == 200, first.text
    rid = first.json()["id"]
    again = await broken.post("/v1/responses", json={**body, "previous_response_id": rid})
    assert again.status_code == 400
    assert again.json()["error"]["param"] == "previous_response_id"
    assert (await broken.get(f"/v1/responses/{rid}")).status_code == 404
    metrics = (await broken.get("/metrics")).text
    assert 'penelope_response_store_errors_total{kind="write",replica="standalone"} 1.0' in metrics
