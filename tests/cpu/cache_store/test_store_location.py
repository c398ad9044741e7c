"""Where a store lives: paths, URIs, and S3 endpoints configured as for real S3."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from cache_store import StoreLocation
from penelope_engine.config import CacheConfig
from penelope_engine.errors import ConfigError


@pytest.mark.parametrize(
    ("uri", "endpoint", "region", "message"),
    [
        ("", None, None, "empty"),
        ("ftp://host/x", None, None, "unknown scheme"),
        ("/tmp/store", "http://127.0.0.1:9000", None, "s3:// URIs only"),
        ("s3:///prefix", None, None, "names no bucket"),
        ("s3://bucket/p", "127.0.0.1:9000", None, "http://host:port"),
        ("s3://bucket/p?region=x", None, "us-east-1", "not both"),
    ],
)
def test_a_malformed_location_is_refused_with_the_fix(uri, endpoint, region, message) -> None:
    with pytest.raises(ValueError, match=message):
        StoreLocation(uri, endpoint, region)


def test_the_cache_config_validates_its_store_location_when_built() -> None:
    with pytest.raises(ConfigError, match="s3:// URIs only"):
        CacheConfig(store_uri="/tmp/x", store_endpoint="http://127.0.0.1:9000")
    with pytest.raises(ConfigError, match="need a store_uri"):
        CacheConfig(store_region="us-east-1")
    c = CacheConfig(store_uri="s3://b/p", store_endpoint="https://s3.example", store_region="eu")
    assert c.store_location() == StoreLocation("s3://b/p", "https://s3.example", "eu")


def test_an_s3_location_opens_at_its_endpoint_and_region(s3_store: StoreLocation) -> None:
    fs, root = s3_store.open()
    assert isinstance(fs, pafs.S3FileSystem) and fs.region == "us-east-1"
    assert root == s3_store.uri.removeprefix("s3://")
    with fs.open_output_stream(f"{root}/probe") as f:
        f.write(b"ok")
    assert fs.open_input_stream(f"{root}/probe").read() == b"ok"


def test_a_local_path_expands_where_the_store_opens(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PENELOPE_STATE", str(tmp_path))
    fs, root = StoreLocation("$PENELOPE_STATE/store").open()
    assert isinstance(fs, pafs.LocalFileSystem) and root == str(tmp_path / "store")
