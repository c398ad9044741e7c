"""Agent traces through the real engine, and the simulator's calibration against them.

Modules:
    calibrate   fit the CPU cost model from engine steps; simulator vs replay TTFT error
    cli         `penelope bench replay` (and `--calibrate`, `--recalibrate`)
    replayloop  sessions through the real engine in wall-clock time, tool gaps scaled
    runs        workloads by seed, device budgets, set-ups, one engine per run, repeats
    steptimer   each real engine step's load (as the simulator counts it) and its time
"""
