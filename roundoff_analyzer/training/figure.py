"""The loss-curve figure: every setup's training loss and validation loss against the iteration, side by side."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .folder import LOSS_FIGURE  # noqa: F401 - named where the folder's files are

# The training loss of one batch is noisy; its running mean over this many iterations is drawn over it.
SMOOTHING = 20


def loss_figure(log: pd.DataFrame, setups: list[str]) -> Figure:
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    train_ax, val_ax = fig.subplots(1, 2)
    window = max(1, min(SMOOTHING, int((log["iteration"] > 0).groupby(log["setup"]).sum().max() or 0) // 10))
    for index, label in enumerate(setups):
        own = log[log["setup"] == label].sort_values("iteration")
        steps = own[(own["iteration"] > 0) & own["loss"].notna()]
        colour = f"C{index % 10}"
        if not steps.empty:
            train_ax.plot(steps["iteration"], steps["loss"], color=colour, alpha=0.25, linewidth=0.8)
            train_ax.plot(
                steps["iteration"], steps["loss"].rolling(window, min_periods=1).mean(), color=colour, label=label
            )
        validated = own[own["val_loss"].notna()]
        val_ax.plot(validated["iteration"], validated["val_loss"], color=colour, marker="o", label=label)
    train_ax.set_title(f"training loss (one batch per iteration; line: running mean of {window})")
    val_ax.set_title("validation loss (held-out batches, float32 native rk4)")
    for ax in (train_ax, val_ax):
        ax.set_xlabel("iteration")
        ax.set_ylabel("loss")
        ax.grid(True, alpha=0.3)
    val_ax.legend(loc="best", fontsize="small")
    return fig
