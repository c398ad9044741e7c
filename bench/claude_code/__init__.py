"""The Claude Code CLI against `penelope serve`: protocol and cache with a real agent."""
