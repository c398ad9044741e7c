"""What the penelope cache tells the router and the adapter: read-only walks of the tree.

- `settle`: a finished request of a session: its token path, the tree node it
  ends at, and its retention pin (`sessions.RetainPins`).
- `session_rows`: per session, the tokens its last history still holds on the
  device and on the host (tree path + its shelf record), and its last access.
- `shared_prefixes`: the token paths of shared, device-resident prefixes (the
  adapter names their pages with Penelope's page hasher for the router).
- `snapshot`: both, as plain data for SGLang's `get_internal_state` reply.

The walks follow SGLang's own match (child keys, page-aligned `match_at`) but
never touch access times or split nodes.
"""

from __future__ import annotations

from array import array
from typing import Any

from sglang.srt.mem_cache.radix_cache import RadixKey

from penelope_engine.protocol import DIGEST_LIMITS
from penelope_sglang.contract import PenelopeTree
from penelope_sglang.results import key_tokens
from penelope_sglang.sessions import SessionEntry
from penelope_sglang.support import FULL, path_above

VIEW_KEY = "penelope"  # the key of Penelope's part of `get_internal_state`


class SessionViews:
    def __init__(self, cache: PenelopeTree) -> None:
        self.cache = cache

    def settle(self, session: str, req: Any) -> None:
        """After SGLang cached a finished request: where its session's history ends now."""
        cache = self.cache
        tokens = array("q", list(req.origin_input_ids) + list(req.output_ids or ()))
        namespace = (getattr(req, "extra_key", None), getattr(req, "cache_salt", None))
        node_id, _, _ = self._walk(namespace, tokens)
        now = cache.evictor.clock()
        cache.book.settle(session, tokens, node_id, now)
        entry = cache.book.get(session)
        if entry is not None:
            cache.pins.pin(entry, now)

    def _walk(
        self, namespace: tuple[str | None, str | None], tokens: array
    ) -> tuple[int | None, int, int]:
        """(deepest node on the path, device tokens, host tokens) along `tokens`."""
        cache = self.cache
        ps = cache.page_size
        key = RadixKey(tokens, namespace[0], cache_salt=namespace[1]).page_aligned(ps)
        node = cache.tree_core.root_node
        offset = device = host = 0
        deepest = None
        while offset < len(key):
            child = node.children.get(key.child_key_at(offset, ps))
            if child is None:
                break
            matched = child.key.match_at(key, offset, page_size=ps)
            if matched < len(child.key):
                break
            data = child.component_data[FULL]
            if data.value is not None:
                device += matched
            elif data.host_value is not None:
                host += matched
            else:
                break
            node, offset, deepest = child, offset + matched, child.id
        return deepest, device, host

    def held(self, entry: SessionEntry) -> tuple[int, int]:
        """(device, host) tokens the session's last history still holds in this cache."""
        _, device, host = self._walk(entry.namespace, entry.path)
        for record in self.cache.shelf.records():
            if record.session == entry.session:
                device += record.device_len
                host += record.host_len
        return device, host

    def session_rows(self, limit: int = DIGEST_LIMITS.sessions) -> list[list[Any]]:
        """[session, device_tokens, host_tokens, last_access] of the most recent sessions."""
        entries = sorted(self.cache.book.entries(), key=lambda e: -e.last_access)[:limit]
        rows = []
        for entry in entries:
            device, host = self.held(entry)
            rows.append([entry.session, device, host, entry.last_access])
        return rows

    def shared_prefixes(self, limit_pages: int = DIGEST_LIMITS.prefix_pages) -> list[list[Any]]:
        """[extra_key, cache_salt, tokens] of shared device-resident prefixes, deepest first.

        A node is shared when two paths branch below it (or did: the cache's
        sticky `shared_ids`); only device-resident paths count.
        """
        cache = self.cache
        out: list[list[Any]] = []
        pages = 0
        shared = [
            node
            for node in cache.tree_core._node_arena.values()  # noqa: SLF001 - SGLang: its tree's node arena
            if node.parent is not None
            and (len(node.children) >= 2 or node.id in cache.shared_ids)
            and node.component_data[FULL].value is not None
        ]
        shared.sort(key=lambda n: -len(path_above(n)))
        covered: list[array] = []
        for node in shared:
            path = path_above(node)
            path.extend(key_tokens(node.key))
            if any(c[: len(path)] == path for c in covered):
                continue  # a deeper shared path already names these pages
            covered.append(path)
            out.append([node.key.extra_key, node.key.cache_salt, path.tolist()])
            pages += len(path) // cache.page_size
            if pages >= limit_pages:
                break
        return out

    def snapshot(
        self,
        session_limit: int = DIGEST_LIMITS.sessions,
        prefix_pages: int = DIGEST_LIMITS.prefix_pages,
    ) -> dict[str, Any]:
        """Plain data (msgpack-friendly) for the adapter."""
        cache = self.cache
        counters = cache.counters
        return {
            "clock": cache.evictor.clock(),
            "page_size": cache.page_size,
            "sessions": self.session_rows(session_limit),
            "shared_prefixes": self.shared_prefixes(prefix_pages),
            "counters": dict(vars(counters)),
            "host_tier": cache.host_tier is not None,
            "retained": cache.pins.pinned(),
        }
