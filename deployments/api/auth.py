"""Bearer-key authentication; the key names the caller's tenant.

Keys are compared as SHA-256 digests with `hmac.compare_digest`, against
every configured key without an early exit, so neither the content nor the
position of a key leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from deployments.api.errors import unauthorized
from deployments.api.settings import DEFAULT_TENANT


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Authenticator:
    """Maps an `Authorization` header to a tenant, or raises 401."""

    def __init__(self, api_keys: Mapping[str, str]) -> None:
        self._keys = [(_digest(k), tenant) for k, tenant in api_keys.items()]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def tenant(self, authorization: str | None) -> str:
        if not self.enabled:
            return DEFAULT_TENANT
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise unauthorized()
        found = self._match(_digest(presented.strip()))
        if found is None:
            raise unauthorized()
        return found

    def _match(self, presented: bytes) -> str | None:
        found = None
        for digest, tenant in self._keys:
            if hmac.compare_digest(presented, digest):
                found = tenant
        return found
