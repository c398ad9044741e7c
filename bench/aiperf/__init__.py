"""aiperf, the field's own benchmark client, against Penelope and the peers (issue 61).

aiperf runs in its own venv (`make aiperf`); these modules feed it our traces
and a tokenizer, run it, and read its JSON back (docs/aiperf.md).

Modules:
    env        aiperf's venv: found (or the command that builds it), called with a deadline
    tokenizer  a Hugging Face tokenizer directory from the bundled GGUF's own tokenizer
    export     our sessions as aiperf Mooncake trace rows (multi-turn and per-request shapes)
    export_cli `penelope bench export-trace`: the files, our statistics, aiperf analyze-trace's
    synth      aiperf's own `synthesize agentic-code` sessions, scaled down to a 2-core CPU
    profile    one `aiperf profile` run against one server, its JSON read back
    report     the table of aiperf's figures and the ratios between servers
    cli        `penelope bench aiperf`: both workloads against each server
"""
