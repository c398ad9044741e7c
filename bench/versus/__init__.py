"""`penelope bench versus`: an agent-trace replay over HTTP against OpenAI-compatible
servers (Penelope, vLLM, ...), side by side on this machine.

`plan` turns a trace into the requests every server gets (token ids, gaps,
starts), `client` replays them and times each stream, `servers` starts, stops
and reads back each server's KV capacity, `report` summarises, tabulates and
plots, `predict` runs the simulator on the same workload, `cli` is the command.
"""
