"""The cache room: what to keep, where it lives, what goes first. No torch.

`PrefixCache` (prefix_cache) is the page face the scheduler and the engine use,
and `Sessions` (session_book) the book of session records beside it; the rest
sits under them. Bytes move through a `TierIO` the caller supplies
(`penelope_engine.tiers.copies.TorchTiers`, or the simulator's timed tiers),
so nothing here depends on the tiers or the scheduler rooms.

Modules:
    prefix_cache  `PrefixCache`: match, lock, insert, evict, demote, spill
    session_book  `Sessions`: session records, their events, creation at arrival, bounds
    tree          radix tree over pages whose pages may be holes
    pages         page identity: chained 64-bit hashes, namespaced by model and tenant
    tier          `Tier`: where a page's KV is (device, host, store, hole)
    placement     where each page lives and every move between tiers
    eviction      eviction policies and their registry (lru, penelope, greedydual, ...)
    evict_heap    per-tier heaps of victim nodes, ranked by the policy
    sessions      per-session timing (`SessionInfo`) the return-aware policies read
    request_life  `RequestLife`: a request against the cache in three calls (begin, cache, release)
    store_pages   `StorePages`: pages between the cache and the store: reads ahead, writes behind
    digests       what a replica tells the router: session holdings, shared prefixes
    integrity     the cache's invariants, checked in full
    allocator     page allocators of one pool, with an integrity check
"""
