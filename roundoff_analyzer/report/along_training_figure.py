"""The along-training figure: each error in units of u against the training iteration, one line per setup."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .along_training_findings import TRAINING_METRICS, trends
from .figure_data import trend_label, varying_columns
from .figures import figure_legend

_MARKERS = ("o", "s", "^", "D", "v", "P")


def along_training_figure(results: pd.DataFrame) -> Figure | None:
    """One panel per error (final state, gradient w.r.t. y0, parameter gradient), x the training iteration, y the error
    over u, at the largest n_timesteps; None when no setup has two checkpoints with an iteration."""
    by_metric = {metric: trends(results, metric) for metric in TRAINING_METRICS}
    if not any(by_metric.values()):
        return None
    fig = Figure(figsize=(5.2 * len(by_metric), 4.6), layout="constrained")
    axes = fig.subplots(1, len(by_metric), squeeze=False)[0]
    n: int | None = None
    iterations: set[int] = set()
    for ax, (metric, found) in zip(axes, by_metric.items()):
        varying = varying_columns(found)
        for index, trend in enumerate(found):
            points = [(i, u) for i, u in zip(trend.iterations, trend.over_u) if u is not None and u > 0]
            ax.plot(
                [i for i, _ in points],
                [u for _, u in points],
                label=trend_label(trend, varying),
                color=f"C{index % 10}",
                marker=_MARKERS[index % len(_MARKERS)],
                linestyle="-" if index < 10 else "--",
            )
            n, iterations = trend.n_timesteps, iterations | set(trend.iterations)
        ax.set_yscale("log")
        positive = sorted(i for i in iterations if i > 0)
        # 0 is the start of training: a symmetric-log axis keeps it while spreading the later iterations.
        ax.set_xscale("symlog", linthresh=positive[0] if positive else 1)
        ax.set_xticks(sorted(iterations), labels=[str(i) for i in sorted(iterations)])
        ax.minorticks_off()
        ax.set_title(f"{TRAINING_METRICS[metric]} error")
        ax.set_xlabel("training iteration")
        ax.set_ylabel("relative error / u")
    fig.suptitle(f"roundoff along training, at n_timesteps = {n} (the sweep's largest)")
    figure_legend(fig, any_failed=False)
    return fig
