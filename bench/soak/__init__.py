"""`penelope bench soak`: many short requests against the standalone server; state stays flat.

Modules:
    cli     the command: options, JSON, the table of slopes, the plot
    client  the spawned HTTP client: sessionless requests and multi-turn sessions
    config  `SoakConfig`: one option per field, and the model served
    server  this process: the standalone server, the state sampler, slopes
"""
