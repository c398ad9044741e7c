"""`penelope bench versus`: an agent-trace replay over HTTP against OpenAI-compatible
servers (Penelope, vLLM, ...), side by side on this machine.

Modules:
    config   `VersusConfig`: servers, workload scale, seeds, KV capacity
    peers    the servers `--peers` starts as their users run them (vLLM-CPU, llama-server)
    plan     a trace -> the requests every server gets (token ids, gaps, starts)
    load     `--load X`: the service rate timed, starts and gaps scaled to X times it
    client   replays them and times each stream
    servers  starts, stops and reads back each server's KV capacity
    runs     one run per server and seed, cold and alone, the order alternated
    report   summary, table, plot
    turns    per returning turn: warm or not on each server, and why Penelope missed
    targets  issue 58's targets per capacity and load, against the best peer there
    predict  the simulator on the same workload, with the CPU cost model fitted here
    cli      `penelope bench versus`
"""
