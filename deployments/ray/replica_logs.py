"""Where a Ray Serve replica's log lines go: our packages' loggers through Serve's.

Ray configures only its own loggers in a replica process, so a record of
`penelope_engine`, `cache_store`, `router` or `deployments` reached no handler:
a store that degrades, a read past its budget, a request that failed with a
traceback left no line where an operator looks. Every replica (engine and
ingress) routes them through Ray Serve's handlers when it starts.
"""

from __future__ import annotations

import logging

SERVE_LOG = logging.getLogger("ray.serve")  # lands in the replica's own log file
# Our packages' loggers: in a replica, their records go where Ray Serve's go.
PACKAGE_LOGGERS = ("penelope_engine", "penelope_sglang", "cache_store", "router", "deployments")


def route_package_logs(level: int = logging.INFO) -> None:
    """Send our packages' log records to the replica's own log file, through Ray Serve's
    handlers (its format, its rotation). Idempotent."""
    for name in PACKAGE_LOGGERS:
        logger = logging.getLogger(name)
        for handler in SERVE_LOG.handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False  # once, not again through a root handler
