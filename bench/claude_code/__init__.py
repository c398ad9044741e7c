"""The Claude Code CLI against `penelope serve`: protocol and cache with a real agent.

Modules:
    cli      `penelope bench claude-code`: the pinned CLI twice in one session, JSON out
             (on the harness of `bench.agent_cli`)
    setups   the served models it runs against, and how Claude Code meets each
"""
