"""The `penelope` command line: the top layer, above the engine, the benchmarks and the servers.

`penelope_cli.cli` dispatches to each tool's module (`penelope_cli.demo`,
`penelope_cli.serve`, `penelope_cli.verify`, `bench.*`); nothing below
this package imports it but `helpformat`, the one help style the benches' parsers
share too (it imports only the standard library).

Modules:
    cli            The `penelope` command: one entry point that dispatches to each tool
    closeness      How close two results are, as `penelope verify` judges them: NaN always
                   fails
    helpformat     One help style for every `penelope` parser (the CLI's and the benches'):
                   options from config fields and their help metadata
    demo           `penelope demo`: a short agent session on the embedded engine, with a
                   tight cache
    serve          `penelope serve`: the OpenAI-compatible server and one engine in one
                   process, no Ray
    verify         `penelope verify`: recomputing holes is exact, in the decoder and through
                   the whole engine
    verify_engine  The engine and transformers checks of `penelope verify`
    verify_fused   The fused check of `penelope verify`: holes recomputed in one forward
                   equal a full prefill
"""
