"""The tiers room: KV bytes in device and host pools and the Arrow store, and moving them.

Torch lives in `kv_pool`, `copies` and `transfer` only; `contract` and `planner` are
torch-free (the scheduler imports them).

Modules:
    kv_pool       KV tensors per layer, addressed by flat slot (device or pinned host)
    copies        `TorchTiers`: copies device <-> host <-> Arrow store
    transfer      `PageMover`: whole pages between two pools through a pinned ring
    contract      what the scheduler asks of tiers: loads, and when copies are done
    planner       load or recompute per missing segment; the cost model calibrated live
    handover      sessions that change replica find their history in the shared store
    drain         a leaving replica's drain: what the store lacks written, what could not be
                  named with why
    path_records  a session's path record in the store: read on arrival, written after pages
    segment_writer  KV segments written behind the step, counted by page (pending, written,
                  lost)
    write_behind  one background thread writing to the store within a byte bound
    budget        `ReadBudget`: a store read on the request path waits a fixed budget at most
"""
