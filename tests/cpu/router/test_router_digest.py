"""The replica digest: built from engine SessionDigests, plain data, capped, strict decode."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from penelope_engine.protocol import SessionDigest
from router import (
    DigestError,
    ReplicaDigest,
    SessionHolding,
    build_digest,
    decode_digest,
    encode_digest,
)


def test_encode_decode_round_trip_through_json() -> None:
    digest = ReplicaDigest(
        sessions={"a": SessionHolding(160, 32, 0, 12.5), "b": SessionHolding(0, 0, 64, 3.0)},
        prefix_hashes=frozenset({1, 2**64 - 1}),
        ts=99.0,
        queue_len=4,
    )
    wire = json.loads(json.dumps(encode_digest(digest)))
    assert decode_digest(wire) == digest


def test_build_digest_keeps_the_most_recently_used_sessions() -> None:
    engine_digests = [SessionDigest(f"s{i}", 16 * i, 0, 0, last_access=float(i)) for i in range(10)]
    engine_digests.append(SessionDigest("gone", 0, 0, 0, last_access=100.0))
    hashes = np.array([5, 6, 7, 2**63 + 1], dtype=np.uint64)
    wire = build_digest(engine_digests, hashes, limit=3, prefix_limit=2, queue_len=2, now=7.0)
    json.dumps(wire)  # plain data only (numpy ints converted)
    digest = decode_digest(wire)
    assert set(digest.sessions) == {"s9", "s8", "s7"}
    assert digest.sessions["s8"] == SessionHolding(128, 0, 0, 8.0)
    assert digest.prefix_hashes == frozenset({5, 6})
    assert (digest.ts, digest.queue_len) == (7.0, 2)


def test_build_digest_with_zero_limit_is_empty_but_valid() -> None:
    wire = build_digest([SessionDigest("s", 16, 0, 0, 1.0)], limit=0, now=1.0)
    assert decode_digest(wire).sessions == {}


def test_no_report_yet_decodes_to_an_empty_digest() -> None:
    assert decode_digest({}) == ReplicaDigest()
    assert decode_digest(None) == ReplicaDigest()


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"v": 2, "sessions": {}}, "version"),
        ({"v": 1, "sessions": []}, "mapping"),
        ({"v": 1, "sessions": {"s": [1, 2, 3]}}, "expected"),
        ({"v": 1, "sessions": {"s": [-1, 0, 0, 1.0]}}, "ints >= 0"),
        ({"v": 1, "sessions": {"s": [1, 0, 0, "x"]}}, "last_access"),
        ({"v": 1, "prefix_hashes": [2**64]}, "uint64"),
        ({"v": 1, "prefix_hashes": [-3]}, "uint64"),
        ({"v": 1, "queue_len": -1}, "queue_len"),
    ],
)
def test_malformed_digests_raise_a_clear_error(payload: dict[str, Any], match: str) -> None:
    with pytest.raises(DigestError, match=match):
        decode_digest(payload)


def test_negative_limits_are_rejected() -> None:
    with pytest.raises(DigestError, match="limit"):
        build_digest([], limit=-1, now=0.0)
