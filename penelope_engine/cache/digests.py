"""What a replica's cache tells the router: per-session holdings and shared prefixes. No torch.

Read-only walks over the tree and the session records; `Sessions.digests` and
`PrefixCache.shared_prefix_hashes` expose them.
"""

from __future__ import annotations

from collections.abc import Mapping

from penelope_engine.cache.sessions import SessionInfo
from penelope_engine.cache.tree import PageTree
from penelope_engine.protocol import DIGEST_LIMITS, SessionDigest


def shared_prefix_hashes(tree: PageTree, limit: int = DIGEST_LIMITS.prefix_pages) -> list[int]:
    """Page ids of shared prefixes held on the device, depth first (router digests)."""
    out: list[int] = []
    stack = list(tree.root.children.values())
    while stack and len(out) < limit:
        node = stack.pop()
        if node.shared and node.n_device:
            out.extend(int(h) for h in node.hashes[: limit - len(out)])
            stack.extend(node.children.values())
    return out


def session_digests(
    sessions: Mapping[str, SessionInfo], page_size: int, limit: int = DIGEST_LIMITS.sessions
) -> list[SessionDigest]:
    """Tokens each of the `limit` most recent sessions holds per tier (device, host, store)."""
    recent = sorted(sessions.items(), key=lambda kv: -kv[1].last_access)[:limit]
    out = []
    for sid, info in recent:
        dev = host = store = 0
        for node in info.leaf.path_up() if info.leaf is not None else ():
            summary = node.summary
            dev += node.n_device
            host += summary.host_only
            store += summary.store_only
        ps = page_size
        out.append(SessionDigest(sid, dev * ps, host * ps, store * ps, info.last_access))
    return out
