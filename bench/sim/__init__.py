"""The discrete-event simulator: the engine's scheduling core on a cost model's clock.

config      `SimConfig`: policy, tiers, budgets, replicas, router, scheduler
loop        the event loop: sessions, tool gaps, routing by the real router core
replica     one replica: the engine's `Scheduler` over the real `PrefixCache`, timed steps
tiers       copies that take time on a PCIe channel, over real tiers or none
costmodel   `StepLoad`, the `CostModel` interface (also the planner's), the CPU model fit
roofline    Qwen3 8B/14B/32B on H100/H200: the stated GPU roofline
metrics     per-request and per-session records, one run's summary
report      rows over seeds (mean, spread, per-seed ratios), JSON out and in, table, PNGs
cliargs     the options `bench simulate` and `bench replay` share, `comma_list`
simulate    `penelope bench simulate`
ablation    `penelope bench ablation`: each lever alone and together, from simulate JSON
agree       `penelope bench agree`: the real engine and the simulator, request by request
"""
