"""The scheduling room: the one core the engine and the simulator both run. No torch.

Modules:
    scheduler  continuous batching with chunked fused prefill, decode pages, preemption
    intake     the waiting queue and who is admitted next: queue keys, backfill, retries
    admission  one request's admission: match, lock, allocate, load or recompute, usage
    agent      agent levers: queue order, backfill, KV retention during tool calls
    hinted     a harness's hints applied within the tenant's pin quotas
    ledger     the miss ledger: why each computed prompt token was not a cache hit
    sequence   per-request state while a request runs; a batch item
    records    session records stay bounded: sessionless requests keep none, idle ones expire
    prefetch   a hinted session's store pages read into the host tier before it returns
"""
