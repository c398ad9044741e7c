"""A request that names no temperature samples at the server's `default_temperature`."""

from __future__ import annotations

import pytest
from deploy_testkit import MODEL, TINY_ENGINE, open_client

from deployments.api.settings import ApiSettings
from deployments.api.standalone import standalone_app
from penelope_engine.errors import ConfigError

pytestmark = pytest.mark.anyio


async def _texts(settings: ApiSettings, **extra: object) -> list[str]:
    body = {"model": MODEL, "prompt": "The repository has three modules", "max_tokens": 12}
    out = []
    async for client in open_client(standalone_app(TINY_ENGINE, settings)):
        for _ in range(3):
            r = await client.post("/v1/completions", json={**body, **extra})
            assert r.status_code == 200, r.text
            out.append(r.json()["choices"][0]["text"])
    return out


async def test_no_temperature_is_greedy_under_a_zero_default_and_sampled_under_one() -> None:
    greedy = await _texts(ApiSettings(default_temperature=0.0))
    assert len(set(greedy)) == 1  # the same answer every time
    assert await _texts(ApiSettings(default_temperature=0.0), temperature=0) == greedy
    sampled = await _texts(ApiSettings())  # OpenAI's default, 1: the random model varies
    assert len(set(sampled)) > 1
    named = await _texts(ApiSettings(default_temperature=0.0), temperature=1.0)
    assert len(set(named)) > 1  # a temperature the request names wins


def test_the_default_is_checked() -> None:
    with pytest.raises(ConfigError, match="default_temperature"):
        ApiSettings(default_temperature=2.5)
