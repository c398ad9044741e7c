"""Where a store lives: a local path or a `pyarrow.fs` URI, plus S3 endpoint and region.

A local path is resolved where the store opens (`~` and `$VARS` expanded), so
every node of a cluster resolves it in its own environment. An S3 store is
configured as for real S3::

    uri        s3://bucket/prefix
    endpoint   http://127.0.0.1:9000   an S3-compatible server (MinIO, Ceph, moto);
                                       None: AWS itself, or $AWS_ENDPOINT_URL when set
    region     us-east-1               None: $AWS_REGION / $AWS_DEFAULT_REGION / the SDK's

Credentials never appear here: the AWS SDK's default chain finds them
($AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY [+ $AWS_SESSION_TOKEN],
$AWS_PROFILE and ~/.aws/credentials, or the instance's role).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from cache_store.health import StoreTuning

_SCHEMES = frozenset({"file", "s3", "gs", "gcs", "hdfs", "abfs", "abfss", "mock"})


def resolve_uri(uri: str) -> str:
    """A URI as given (`s3://...`), or a local path made absolute: `~` and `$VARS` expanded."""
    if "://" in uri:
        return uri
    return os.path.abspath(os.path.expanduser(os.path.expandvars(uri)))


@dataclass(frozen=True)
class StoreLocation:
    """A store's URI and, for S3, the endpoint and region. Validated at construction."""

    uri: str
    endpoint: str | None = None
    region: str | None = None

    def __post_init__(self) -> None:
        if not self.uri:
            raise ValueError("the store URI is empty; give a local path or s3://bucket/prefix")
        scheme = urlsplit(self.uri).scheme if "://" in self.uri else ""
        if scheme and scheme not in _SCHEMES:
            raise ValueError(
                f"store URI {self.uri!r} has an unknown scheme {scheme!r}; "
                f"expected a local path or one of {sorted(_SCHEMES)}"
            )
        if (self.endpoint or self.region) and scheme != "s3":
            raise ValueError(
                f"store endpoint and region apply to s3:// URIs only, not {self.uri!r}"
            )
        if scheme == "s3" and not urlsplit(self.uri).netloc:
            raise ValueError(f"store URI {self.uri!r} names no bucket; use s3://bucket/prefix")
        if self.endpoint is not None and urlsplit(self.endpoint).scheme not in ("http", "https"):
            raise ValueError(
                f"store endpoint {self.endpoint!r} must be http://host:port or https://host"
            )
        if (self.endpoint or self.region) and "?" in self.uri:
            raise ValueError(
                "give the S3 endpoint and region either as fields or in the URI's query, not both"
            )

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")

    def open(self, tuning: StoreTuning | None = None) -> tuple[pafs.FileSystem, str]:
        """The filesystem and the store's root path inside it (raises OSError if unreachable).

        An S3 client gets `tuning`'s timeouts, and retries each HTTP call (one
        store operation makes several) `tuning.retries` times with the AWS SDK's
        standard backoff (exponential, with jitter)."""
        tuning = tuning or StoreTuning()
        if not self.is_s3 or "?" in self.uri:  # a query configures S3 itself
            return pafs.FileSystem.from_uri(resolve_uri(self.uri))
        parts = urlsplit(self.uri)
        options: dict[str, object] = {
            "connect_timeout": tuning.connect_timeout_s,
            "request_timeout": tuning.request_timeout_s,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=tuning.retries + 1),
        }
        if self.region:
            options["region"] = self.region
        if self.endpoint:
            endpoint = urlsplit(self.endpoint)
            options["endpoint_override"] = endpoint.netloc
            options["scheme"] = endpoint.scheme
        root = f"{parts.netloc}{parts.path}".rstrip("/")
        return pafs.S3FileSystem(**options), root  # type: ignore[arg-type]
