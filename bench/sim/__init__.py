"""The discrete-event simulator: the engine's scheduling core on a cost model's clock.

The experiments that drive it (capacity and the peer grid) are
`bench.experiments`; this room is the simulator alone, with `simulate` and `agree`.

Modules:
    agree         `penelope bench agree`: the real engine and the simulator, request by
                  request
    cliargs       the options `bench simulate` and `bench replay` share, `comma_list`
    copyrates     copies between tiers at the rates an engine was measured to make them
    config        `SimConfig`: policy, tiers, budgets, replicas, router, scheduler
    costmodel     `StepLoad`, the `CostModel` interface (also the planner's), the CPU model
                  fit
    fastpath      the decode fast path: a stretch of decode-only steps granted and applied
                  at once over the engine's scheduler
    hints         hint mode: a harness's `SessionHints` on each request, from the trace's
                  truth
    loop          the event loop: sessions, tool gaps, routing by the real router core
    metrics       per-request and per-session records, one run's summary
    oracle        The offline oracle eviction policy: it reads the future, so only the
                  simulator runs it
    replica       one replica: the engine's `Scheduler` over the real `PrefixCache`, timed
                  steps
    report        rows over seeds (mean, spread, per-seed ratios), JSON out and in, table,
                  PNGs
    roofline      Qwen3 8B/14B/32B on H100/H200: the stated GPU roofline
    setups        Named set-ups: a router plus an engine cache, for Penelope and for the
                  peers it is
    simulate      `penelope bench simulate`
    tiers         copies that take time on a PCIe channel, over real tiers or none
    turns         `SimRequest`: a session's turn as the engine gets it, and how the loop
                  makes one
"""
