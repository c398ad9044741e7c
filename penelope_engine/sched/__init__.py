"""The scheduling room: the one core the engine and the simulator both run. No torch.

Modules:
    scheduler  continuous batching with chunked fused prefill, decode pages, preemption
    admission  one request's admission: match, lock, allocate, load or recompute, usage
    agent      agent levers: queue order, backfill, KV retention during tool calls
    sequence   per-request state while a request runs; a batch item
    records    session records stay bounded: sessionless requests keep none, idle ones expire
"""
