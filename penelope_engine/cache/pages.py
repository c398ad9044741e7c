"""Page identity: a chained 64-bit hash of page-aligned token ids.

Page ``i`` of a sequence is named by a hash of tokens ``0 .. (i+1)*page_size``,
namespaced by model (the hasher's namespace) and tenant. The same id names the
page in the tree, the host tier, the Arrow store and the router digests.

The chain is computed with numpy in one pass (no Python loop per page):

    c_j = mix(sum_t tok[j, t] * M_t)              content of page j, nonlinear
    h_i = mix(R^i * (T + sum_{j<=i} c_j * R^-j))  chained over pages 0..i

All arithmetic wraps modulo 2^64. ``R`` is odd, hence invertible, and the
tenant seed ``T`` separates tenants: equal prompts of two tenants never share
a page id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

_U64 = np.uint64
PUBLIC = "\x00public"  # the tenant name of operator-declared public prefixes
_MASK = (1 << 64) - 1


def seed64(*parts: str) -> int:
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, vectorized (a bijection on uint64)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


class PageHasher:
    """Chained page hashes for one model namespace and page size."""

    def __init__(self, page_size: int, namespace: str) -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.page_size = page_size
        self.namespace = namespace
        rng = np.random.default_rng(seed64("penelope-pages", namespace, str(page_size)))
        self._mult = rng.integers(1, 2**63, size=page_size, dtype=np.uint64) * _U64(2) + _U64(1)
        r = seed64("penelope-radix", namespace) | 1
        self._r = r
        self._r_inv = pow(r, -1, 1 << 64)
        self._pow = np.ones(1, dtype=np.uint64)
        self._pow_inv = np.ones(1, dtype=np.uint64)
        self._tenants: dict[str, np.uint64] = {}

    def _powers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self._pow) < n:
            size = max(n, 2 * len(self._pow))
            r, r_inv = np.full(size, self._r, np.uint64), np.full(size, self._r_inv, np.uint64)
            self._pow = np.cumprod(r, dtype=np.uint64) * _U64(self._r_inv)
            self._pow_inv = np.cumprod(r_inv, dtype=np.uint64) * _U64(self._r)
        return self._pow[:n], self._pow_inv[:n]

    def tenant_seed(self, tenant: str) -> np.uint64:
        seed = self._tenants.get(tenant)
        if seed is None:
            seed = self._tenants[tenant] = _U64(seed64("penelope-tenant", self.namespace, tenant))
        return seed

    def num_pages(self, num_tokens: int) -> int:
        return num_tokens // self.page_size

    def hashes(
        self,
        token_ids: np.ndarray | list[int] | tuple[int, ...],
        tenant: str = "default",
        public_pages: int = 0,
    ) -> np.ndarray:
        """Hashes of every *full* page of `token_ids` (a trailing partial page has none).

        The first `public_pages` pages (a prefix an operator declared public) are
        named alike for every tenant; every later page is the tenant's own.
        """
        tokens = np.asarray(token_ids, dtype=np.int64)
        n = len(tokens) // self.page_size
        if n == 0:
            return np.empty(0, dtype=np.uint64)
        pages = tokens[: n * self.page_size].reshape(n, self.page_size).astype(np.uint64)
        content = mix64((pages * self._mult).sum(axis=1, dtype=np.uint64))
        pw, pw_inv = self._powers(n)
        chain = np.cumsum(content * pw_inv, dtype=np.uint64) + self.tenant_seed(tenant)
        if public_pages > 0:
            delta = (int(self.tenant_seed(PUBLIC)) - int(self.tenant_seed(tenant))) % (1 << 64)
            chain[: min(public_pages, n)] += _U64(delta)
        return mix64(chain * pw)


class PublicPrefixes:
    """The token prefixes an operator declared public, as pages of one hasher."""

    def __init__(self, hasher: PageHasher, prefixes: tuple[tuple[int, ...], ...]) -> None:
        ps = hasher.page_size
        self._prefixes = [p for p in prefixes if len(p) >= ps]
        self._hashes = [hasher.hashes(p, public_pages=len(p) // ps) for p in self._prefixes]
        self.page_size = ps
        self.hashes = frozenset(int(h) for hs in self._hashes for h in hs)

    def pages(self, prompt: tuple[int, ...]) -> int:
        """Full pages of the longest declared prefix the prompt starts with (0: none)."""
        return max((len(h) for h in self._matching(prompt)), default=0)

    def tail(self, prompt: tuple[int, ...]) -> int | None:
        """The id of the last public page of `prompt`, or None when it has none."""
        best = max(self._matching(prompt), key=len, default=None)
        return None if best is None else int(best[-1])

    def _matching(self, prompt: tuple[int, ...]) -> list[np.ndarray]:
        return [h for p, h in zip(self._prefixes, self._hashes) if prompt[: len(p)] == p]


@dataclass(frozen=True)
class PageNaming:
    """Everything that names a replica's pages: page size, model namespace, public prefixes.

    An engine publishes it (the ingress gets it through `describe`) so that a
    process without the engine names a prompt's first pages exactly as the
    engine, the router digests and the store do.
    """

    page_size: int
    namespace: str
    public_prefixes: tuple[tuple[int, ...], ...] = ()

    def hasher(self) -> PageHasher:
        return PageHasher(self.page_size, self.namespace)


class FirstPages:
    """The ids of a prompt's first full pages under one `PageNaming` (tenant-aware)."""

    def __init__(self, naming: PageNaming) -> None:
        self.hasher = naming.hasher()
        self.public = PublicPrefixes(self.hasher, naming.public_prefixes)

    def __call__(self, prompt: tuple[int, ...], tenant: str, pages: int) -> tuple[int, ...]:
        ps = self.hasher.page_size
        head = prompt[: pages * ps]
        public = min(self.public.pages(prompt), len(head) // ps)
        return tuple(int(h) for h in self.hasher.hashes(head, tenant, public))
