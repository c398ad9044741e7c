"""Frozen settings of the HTTP API: auth, limits, defaults.

Both the standalone server and the Ray ingress build the same app from one
`ApiSettings`; nothing reads the environment after construction.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from cache_store.location import StoreLocation
from deployments.api.tools.parsers import PARSER_CHOICES
from penelope_engine.cache_config import CacheConfig
from penelope_engine.options import with_help
from penelope_engine.util import require

API_KEYS_ENV = "PENELOPE_API_KEYS"
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class ApiSettings:
    """What the HTTP layer enforces before a request reaches the engine.

    `api_keys` maps a bearer key to its tenant; empty disables auth. The tenant
    namespaces the request's cache pages, so two tenants never share KV.
    """

    api_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    metrics_require_auth: bool = with_help(False, "/metrics needs an API key too")
    tenant_header: str | None = None  # trusted gateway header naming the tenant; None: off
    max_body_bytes: int = 4 << 20
    max_pending: int = with_help(  # per API process
        256, "admitted unfinished requests before 429"
    )
    retry_after_s: int = 1
    max_tokens_limit: int = 4096  # largest `max_tokens` a client may ask for
    default_max_tokens: int = 256  # when the client sets none (bounded by the context)
    # A request that names no temperature samples at this (OpenAI's and Anthropic's default,
    # 1; vLLM takes the model's generation_config, `--override-generation-config` to set it)
    default_temperature: float = with_help(1.0, "temperature of a request that names none")
    max_stop_sequences: int = 4
    max_stop_chars: int = 256
    request_timeout_s: float = 600.0  # from arrival; past it the request is aborted (504)
    body_idle_timeout_s: float = 30.0  # a request body with no byte this long: 408
    connect_idle_timeout_s: float = 60.0  # `penelope serve`: a new connection silent this long
    stream_stall_timeout_s: float = 60.0  # a stream its client reads nothing of this long: aborted
    replica_name: str = "standalone"  # `replica` label of this process's metrics
    # The tool-call format (`deployments.api.tools.parsers`): "auto" reads the chat template.
    tool_parser: str = with_help(
        "auto", "the model's tool-call format (auto: read from its chat template)"
    )
    max_tools: int = 128  # tools one request may offer
    max_tools_bytes: int = 256 << 10  # their JSON together (names, descriptions, schemas)
    # Stored responses (`/v1/responses` with store: true, `deployments.api.responses_api`):
    # where (a local path or a pyarrow.fs URI; None: the engine's store_uri when it has one,
    # else this process's memory) and each tenant's bounds.
    responses_store_uri: str | None = None
    responses_store_endpoint: str | None = None  # an S3-compatible server, as store_endpoint
    responses_store_region: str | None = None
    responses_budget_bytes: int = with_help(256 << 20, "stored responses' bytes per tenant")
    responses_ttl_s: float = with_help(7 * 86400.0, "how long a stored response is kept")

    def __post_init__(self) -> None:
        object.__setattr__(self, "api_keys", MappingProxyType(dict(self.api_keys)))
        for key, tenant in self.api_keys.items():
            require(len(key) >= 8, "an API key must have at least 8 characters")
            require(bool(tenant), f"API key ...{key[-4:]} has an empty tenant")
        for name in ("max_body_bytes", "max_pending", "max_tokens_limit", "default_max_tokens"):
            require(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        require(self.retry_after_s >= 0, f"retry_after_s must be >= 0, got {self.retry_after_s}")
        require(
            0 < self.request_timeout_s < math.inf,
            f"request_timeout_s must be positive and finite, got {self.request_timeout_s}",
        )
        for name in ("body_idle_timeout_s", "connect_idle_timeout_s", "stream_stall_timeout_s"):
            value = getattr(self, name)
            require(0 < value < math.inf, f"{name} must be positive and finite, got {value}")
        require(self.max_stop_sequences >= 0, "max_stop_sequences must be >= 0")
        require(self.max_stop_chars > 0, "max_stop_chars must be positive")
        require(
            self.default_max_tokens <= self.max_tokens_limit,
            f"default_max_tokens ({self.default_max_tokens}) must be <= max_tokens_limit "
            f"({self.max_tokens_limit})",
        )
        require(bool(self.replica_name), "replica_name must not be empty")
        require(
            self.tool_parser in PARSER_CHOICES,
            f"tool_parser must be one of {', '.join(PARSER_CHOICES)}, got {self.tool_parser!r}",
        )
        require(
            0 <= self.default_temperature <= 2,
            f"default_temperature must be in [0, 2], got {self.default_temperature}",
        )
        require(self.max_tools > 0, "max_tools must be positive")
        require(self.max_tools_bytes > 0, "max_tools_bytes must be positive")
        require(self.responses_budget_bytes > 0, "responses_budget_bytes must be positive")
        require(
            0 < self.responses_ttl_s < math.inf,
            f"responses_ttl_s must be positive and finite, got {self.responses_ttl_s}",
        )

    @property
    def responses_store(self) -> StoreLocation | None:
        """Where stored responses live; None: this process's memory."""
        if not self.responses_store_uri:
            return None
        return StoreLocation(
            self.responses_store_uri, self.responses_store_endpoint, self.responses_store_region
        )

    def with_engine_store(self, cache: CacheConfig) -> ApiSettings:
        """These settings with the engine's store for stored responses, unless one is set."""
        if self.responses_store_uri or not cache.store_uri:
            return self
        return replace(
            self,
            responses_store_uri=cache.store_uri,
            responses_store_endpoint=cache.store_endpoint,
            responses_store_region=cache.store_region,
        )

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)


def parse_api_keys(text: str) -> dict[str, str]:
    """Parse `key[:tenant]` entries separated by commas or new lines.

    A key without a tenant gets the default tenant. Lines starting with `#`
    are comments.
    """
    keys: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        key, _, tenant = entry.partition(":")
        keys[key.strip()] = tenant.strip() or DEFAULT_TENANT
    return keys


def load_api_keys(path: str | None = None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """API keys from a file (if given) plus the `PENELOPE_API_KEYS` variable."""
    environ = os.environ if env is None else env
    keys = parse_api_keys(Path(path).read_text()) if path else {}
    keys.update(parse_api_keys(environ.get(API_KEYS_ENV, "")))
    return keys
