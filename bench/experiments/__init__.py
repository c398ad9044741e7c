"""Experiments over the simulator: sessions at an SLO, the peer grid, and their reports.

Each drives `bench.sim` (the simulator) on named set-ups and writes JSON, a table and a
plot; none holds simulator logic of its own.

Modules:
    capacity         `penelope bench capacity`: sessions a fleet holds within a TTFT SLO
    capacity_report  its runs, the best peer, ratios, attribution, table, plot
    capacity_search  one set-up and seed: doubling and bisection on the session count
    peers            `penelope bench peers`: Penelope against the best set-up a user can
                     build today
    peers_report     results of `penelope bench peers`: per set-up rows, the best peer,
                     ratios, table, plot
"""
