"""The router digest's limits have one home (`protocol.DIGEST_LIMITS`): every default that
bounds a digest takes it, and a bad limit is refused."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from penelope_engine.async_engine import AsyncEngine
from penelope_engine.cache import digests
from penelope_engine.cache.prefix_cache import PrefixCache
from penelope_engine.cache.session_book import Sessions
from penelope_engine.engine import Engine
from penelope_engine.errors import ConfigError
from penelope_engine.protocol import DIGEST_LIMITS, DigestLimits, EngineProtocol
from router.digest import build_digest


def default(fn: Callable[..., Any], name: str) -> object:
    return inspect.signature(fn).parameters[name].default


@pytest.mark.parametrize("owner", [EngineProtocol, Engine, AsyncEngine])
def test_every_engine_and_cache_default_is_the_one_limit(owner: type) -> None:
    assert default(owner.session_digests, "limit") == DIGEST_LIMITS.sessions
    assert default(owner.shared_prefix_hashes, "limit") == DIGEST_LIMITS.prefix_pages
    assert default(Sessions.digests, "limit") == DIGEST_LIMITS.sessions
    assert default(PrefixCache.shared_prefix_hashes, "limit") == DIGEST_LIMITS.prefix_pages


def test_the_cache_walks_and_the_published_digest_take_the_same_limits() -> None:
    assert default(digests.session_digests, "limit") == DIGEST_LIMITS.sessions
    assert default(digests.shared_prefix_hashes, "limit") == DIGEST_LIMITS.prefix_pages
    assert default(build_digest, "limit") == DIGEST_LIMITS.sessions
    assert default(build_digest, "prefix_limit") == DIGEST_LIMITS.prefix_pages


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ConfigError, match="sessions=-1"):
        DigestLimits(sessions=-1)
    with pytest.raises(ConfigError, match="prefix_pages=-2"):
        DigestLimits(prefix_pages=-2)
