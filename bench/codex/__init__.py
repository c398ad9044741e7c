"""The Codex CLI against `penelope serve`: the Responses API and the cache with a real agent.

Modules:
    cli      `penelope bench codex`: the pinned CLI twice in one session, JSON out
             (on the harness of `bench.agent_cli`)
"""
