"""What the real-CLI benches (`bench.claude_code`, `bench.codex`) share: one harness.

Modules:
    harness  the pinned npm CLI found, `penelope serve` and the recording proxy held,
             the CLI run once per prompt in one scratch session
    proxy    a recording proxy: the requests as the server saw them, with their usage
    report   the cache verdict and JSON report, and the `penelope bench <cli>` main
"""
