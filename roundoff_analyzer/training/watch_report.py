"""`watch_report.md`: what a watch of a training saw (roundoff_analyzer/training/watch.py). It opens with where the
training stopped being safe for training in its precision (the first warned iteration, and why) and the setup the watch
would now recommend, then the figure of the parameter-gradient roundoff and the gradient noise against the iteration
beside the overflow margin, then every row. Written from `watch.json` and `watch.parquet` alone: reading a folder
never runs code from it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ..core.errors import InputError
from ..core.text import printable
from ..judging.verdict import WELL_UNDER
from ..measuring.outcomes import Status
from ..report import formatting
from ..report.figures import save
from ..storage.results import atomic_write_bytes
from .watch import OVERFLOW_MARGIN
from .watch_folder import FIGURES, WATCH_REPORT, WATCH_TABLE, read_watch_manifest, read_watch_table

WATCH_FIGURE = "watch"


def write_watch_report(root: Path, out: Path | None = None) -> Path:
    """`watch_report.md` (or `out`) and its figure under `root/figures/`, from the folder's table and manifest."""
    root = Path(root)
    manifest = read_watch_manifest(root)
    if not (root / WATCH_TABLE).is_file():
        raise InputError(f"watch folder '{printable(root)}' has no {WATCH_TABLE}: the watch has measured nothing yet")
    rows = read_watch_table(root).sort_values("iteration", kind="stable").reset_index(drop=True)
    if rows.empty:
        raise InputError(f"watch folder '{printable(root)}' has an empty {WATCH_TABLE}: the watch has measured nothing")
    figure = save(watch_figure(rows), root / FIGURES, WATCH_FIGURE)
    path = Path(out) if out is not None else root / WATCH_REPORT
    relative = Path(os.path.relpath(figure, path.resolve().parent if out is not None else root)).as_posix()
    atomic_write_bytes(path, render(manifest, rows, relative).encode())
    return path


def watch_figure(rows: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    error_ax, margin_ax = fig.subplots(1, 2)
    iteration = rows["iteration"]
    error_ax.plot(iteration, rows["grad_params_rel_err"], marker="o", label="parameter-gradient roundoff")
    error_ax.plot(iteration, rows["grad_noise_rel"], marker="s", label="gradient noise")
    error_ax.plot(
        iteration,
        WELL_UNDER * rows["grad_noise_rel"],
        linestyle="--",
        color="grey",
        label=f"{WELL_UNDER:g}× the noise (safe for training below)",
    )
    error_ax.set_yscale("log")
    error_ax.set_ylabel("relative error")
    error_ax.set_title("roundoff and gradient noise")
    margin_ax.plot(iteration, rows["overflow_margin"], marker="o", color="C3", label="overflow margin")
    margin_ax.axhline(OVERFLOW_MARGIN, linestyle="--", color="grey", label=f"{OVERFLOW_MARGIN:g}× (warned below)")
    margin_ax.set_yscale("log")
    margin_ax.set_ylabel("format's largest finite / largest magnitude")
    margin_ax.set_title("overflow margin")
    warned = rows[rows["warning"].notna()]
    for ax in (error_ax, margin_ax):
        if not warned.empty:
            ax.axvline(int(warned["iteration"].iloc[0]), color="C3", alpha=0.4, label="first warning")
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    return fig


def render(manifest: dict, rows: pd.DataFrame, figure: str) -> str:
    setup = manifest.get("fingerprint", {}).get("setup", {})
    dtype = str(rows["dtype"].iloc[0])
    described = (
        f"{printable(str(setup.get('library')))} {printable(str(setup.get('method')))}, n_timesteps "
        f"{setup.get('n_timesteps')}, {dtype} under autocast, "
        + ("loss scaled by the training's GradScaler" if setup.get("scaling") == "grad" else "no loss scaling")
    )
    first, last = int(rows["iteration"].iloc[0]), int(rows["iteration"].iloc[-1])
    lines = [
        f"# Watch of a training in {dtype}",
        "",
        f"The training's step as {described}, measured against float64 on the weights and batch of "
        f"{len(rows)} iterations ({first} – {last}, every {manifest.get('every')}).",
        "",
        *_answer(rows, dtype, setup),
        "",
        f"![roundoff, noise and overflow margin against the iteration]({figure})",
        "",
        "| iteration | loss | parameter-gradient roundoff | gradient noise | roundoff / noise | overflow margin "
        "| warning |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows.itertuples(index=False):
        lines.append(
            f"| {row.iteration} | {_g(row.loss)} | {_g(row.grad_params_rel_err)} | {_g(row.grad_noise_rel)} | "
            f"{_times(row.roundoff_to_noise)} | {_times(row.overflow_margin)} | "
            f"{printable(row.warning) if isinstance(row.warning, str) else ''} |"
        )
    return "\n".join(lines) + "\n"


def _answer(rows: pd.DataFrame, dtype: str, setup: dict) -> list[str]:
    """Where it became unsafe, and what the watch would now recommend."""
    warned = rows[rows["warning"].notna()]
    last = rows.iloc[-1]
    ratio, margin = last["roundoff_to_noise"], last["overflow_margin"]
    now = (
        f"At iteration {int(last['iteration'])} the parameter-gradient roundoff is {_times(ratio)} the gradient noise "
        f"(safe for training up to {WELL_UNDER:g}×) and the largest magnitude is {_times(margin)} under {dtype}'s "
        "largest finite."
    )
    if warned.empty:
        return [f"**Safe for training in {dtype} throughout**: no iteration warned. {now}", "", _keep(setup, dtype)]
    became = warned.iloc[0]
    near = rows[rows["overflow_margin"] < OVERFLOW_MARGIN]
    lines = [
        f"**Unsafe from iteration {int(became['iteration'])}**: {printable(str(became['warning']))}.",
        "",
        *(
            [
                f"The overflow margin first fell under {OVERFLOW_MARGIN:g}× at iteration "
                f"{int(near['iteration'].iloc[0])}.",
                "",
            ]
            if not near.empty
            else []
        ),
        now
        if last["status"] == Status.OK
        else f"At iteration {int(last['iteration'])}: {printable(str(last['warning']))}.",
        "",
    ]
    overflow = "largest magnitude" in str(last["warning"]) or last["status"] != Status.OK
    scaled = setup.get("scaling") == "grad"
    if overflow and not scaled:
        advice = (
            f"Recommended now: leave {dtype} for a format with float32's range (bfloat16), or keep the growing "
            f"modules in float32 (`roundoff_analyzer.keep_float32`)."
        )
    elif overflow:
        advice = (
            "Recommended now: the magnitudes, not the loss scale, near the range; leave "
            f"{dtype} for bfloat16, or keep the growing modules in float32."
        )
    else:
        advice = f"Recommended now: a setup other than {dtype} with this solver, chosen by a sweep of these weights."
    return [
        *lines,
        advice + " Which setup measures best on the weights of that iteration is a sweep's to say: save them "
        "(`torch.save(model.state_dict(), 'weights.pt')`) and run "
        "`roundoff sweep --model your_file.py:your_factory --checkpoint weights.pt --dtype float16,bfloat16 "
        "--scaling none,grad,dynamic`.",
    ]


def _keep(setup: dict, dtype: str) -> str:
    return (
        f"Recommended now: keep training in {dtype} with {printable(str(setup.get('library')))} "
        f"{printable(str(setup.get('method')))}, as watched."
    )


def _g(value) -> str:
    return f"{value:.3g}" if formatting.present(value) and math.isfinite(value) else formatting.MISSING


def _times(value) -> str:
    if not formatting.present(value):
        return formatting.MISSING
    return f"{value:.3g}×" if math.isfinite(value) else "∞"
