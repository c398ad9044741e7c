"""The Claude Code CLI against `penelope serve`: protocol and cache with a real agent.

Modules:
    cli      `penelope bench claude-code`: the pinned CLI twice in one session, JSON out
    setups   the served models it runs against, and how Claude Code meets each
    proxy    a recording proxy: the requests as the server saw them, with their usage
"""
