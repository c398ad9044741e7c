"""`penelope bench load`: many concurrent agent sessions against the standalone server.

Modules:
    cli     the command: options, the result table, the exit status
    client  the spawned client: sessions as HTTP requests, and the records' summary
    config  `LoadConfig` and the model served
    server  this process: the server, resident memory, pages and locks left at the end
"""
