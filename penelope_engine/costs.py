"""The stated prefill cost constants: one home for the engine, the cache and the benches.

Prefilling m tokens at positions a, a + 1, ... costs about
``m*C_LIN + C_ATTN*(m*a + m*m/2)`` seconds: linear layers per token, plus
attention over the earlier keys. These are the tiny Qwen3's order of magnitude
on a CPU; the engine's `tiers.planner.CalibratedCost` starts from them and
refits them while running. No imports: every room may use it.
"""

from __future__ import annotations

C_LIN = 66e-6  # seconds per prefilled token, position-independent part
C_ATTN = 0.041e-6  # seconds per prefilled token per earlier key
