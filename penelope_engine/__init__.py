"""The engine: the cache, the one scheduling core, the tiers and the model, in rooms.

Rooms depend one way: `sched` -> `tiers` -> `cache`; `cache`, `sched` and the
torch-free half of `tiers` import no torch. `core.build_core` is the one place
that assembles a cache and a scheduler over tiers: the engine, the simulator
and the replay all call it. Nothing here imports router, deployments, bench,
penelope_cli or penelope_sglang (the SGLang adapter, a package of its own above this one).

Modules:
    cache/        the cache room: tree with holes, pages, placement, eviction policies
    sched/        the scheduling room: scheduler, admission, agent levers, sequences
    tiers/        the tiers room: KV pools, copies, load-or-recompute planner, handover
    model/        paged Qwen3 / Llama decoders, loaders (safetensors, GGUF), the GGUF tokenizer
    core          `build_core`: cache + scheduler + tiers from configs, `CoreHooks`, `BenchHooks`
    engine        `Engine`: the synchronous step loop over the core and the model runner
    engine_store  `EngineStore`, the engine's store face (`Engine.store`): records, drain, flush
    inspection    `Inspection` (`Engine.inspect()`): core, forward, bounded counts, for benches
    parts         the engine's parts from its config: KV pools, store, page identity, tiers
    device_memory the device pool sized to the GPU: what the weights and a warm-up step leave
    checks        a request checked before it is queued; how a turn ended (tool-call regex)
    async_engine  `AsyncEngine`: the `EngineProtocol` over `Engine`, its own step thread
    runner        `ModelRunner`: one forward over a batch, then sampling
    grammar       structured outputs: a request's llguidance grammar masks its own logits row
    protocol      the engine interface: requests, outputs, digests and their limits
    tokenizer     `Tokenizer`: a `tokenizers.Tokenizer`, the chat template, end-of-sequence ids
    stats         `TokenUsage` (the one token-counter type), `EngineStats`, their series metadata
    hints         a harness's session hints (retain, expected gap, end, parent) and grants
    config        frozen, validated configs: model, scheduler, engine (re-exports the two below)
    cache_config  `CacheConfig`: page size, tier budgets, eviction policy, the store's tuning
    options       the named string options, each once: `DType`, `Arch`, write policy, ...
    shipped       what ships and is measured: policy, agent levers, prefill chunk share
    costs         the default prefill cost constants (c_lin, c_attn)
    registry      `Registry`: strategies chosen by name
    fit           the one least-squares fitter (coefficients >= 0)
    errors        the errors the engine raises, each saying what to fix
    util          `cdiv`, `require`
"""
