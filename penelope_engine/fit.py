"""The one least-squares fitter: coefficients >= 0, numpy only.

Used by the engine's `planner.CostCalibrator` (prefill constants from observed
steps) and the simulator's `CpuCostModel.fit` (step coefficients from timings).
"""

from __future__ import annotations

import numpy as np


def nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||x @ c - y|| subject to c >= 0, for x of shape (n, k) and y of shape (n,).

    Columns are scaled to unit maximum (their magnitudes may differ by many
    orders), solved by ordinary least squares, and while any coefficient is
    negative the column with the most negative one is dropped (its coefficient
    is 0) and the rest refit.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"x must be (n, k) and y (n,), got {x.shape} and {y.shape}")
    scale = np.maximum(np.abs(x).max(axis=0, initial=0.0), 1e-30)
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active and len(y):
        sol, *_ = np.linalg.lstsq(x[:, active] / scale[active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol / scale[active]
            return coef
        active.pop(int(np.argmin(sol)))
    return coef
