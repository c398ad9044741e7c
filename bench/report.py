"""What the benches' reports share: a ratio's mean and range, a text table, a figure.

`spread` is the mean, min and max of per-seed values (a ratio's, as every
report writes it); `text_table` pads each column to its widest cell;
`pyplot` is matplotlib's pyplot on the Agg backend (no display; imported only
when a bench plots) and `save_figure` lays out, writes and closes a figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def spread(values: Iterable[float]) -> dict[str, float]:
    """The values' mean, min and max."""
    x = np.asarray(list(values), dtype=float)
    return {"mean": float(x.mean()), "min": float(x.min()), "max": float(x.max())}


def text_table(
    rows: Sequence[Sequence[str]], sep: str = "  ", right_from: int | None = None
) -> str:
    """`rows` with each column padded to its widest cell: left-aligned, or right-aligned
    from column `right_from` on; trailing blanks dropped."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = len(widths) if right_from is None else right_from
    return "\n".join(
        sep.join(
            c.rjust(w) if i >= right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in rows
    )


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 120) -> Path:
    """Lay out, write (making the folder) and close a matplotlib figure."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
