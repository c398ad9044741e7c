"""The `penelope` command line: the top layer, above the engine, the benchmarks and the servers.

`penelope_cli.cli` dispatches to each tool's module (`penelope_cli.demo`,
`deployments.standalone`, `penelope_engine.verify`, `bench.*`); nothing below
this package imports it.
"""
