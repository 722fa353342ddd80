"""The report's figures, drawn without a display: error against n_timesteps, and the adjoint's range per step.

Each function returns a matplotlib Figure (no pyplot, so no global state and no GUI backend); `save` writes it.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.typing import ColorType

from ..axes.dtypes import DTYPES
from ..judging.format_search import bit_layout
from ..measuring.outcomes import Status
from ..storage.results import atomic_write_bytes
from .figure_data import METRIC_NAMES, non_finite_steps, with_run_status, worst_seed, worst_seed_words
from .formatting import span

LINE_COLUMNS = ("library", "scaling", "mode")  # one line per value of these, in every panel
FAILED_LABEL = "× failed (in the top band: no finite value)"
# A step whose value overflowed the low dtype in a run that still ended ok (its backward used a wider adjoint).
RECOVERED_LABEL = "○ overflowed in the low dtype, run ok (recovered)"
_MARKERS = ("o", "s", "^", "D", "v", "P")
_MANTISSA_COLOURS = matplotlib.colormaps["viridis"]
_LINESTYLES = ("-", "--", "-.", ":")
_FAILED_BAND = 0.15  # share of a panel's height, at its top, where failed runs without a finite value are marked
# A dtype's range limit is drawn only within this factor of the data, so that bfloat16's 1e-38…3e38 does not flatten
# every curve; beyond it, the panel's title says where the limit lies.
_RANGE_SHOWN = 1e4
# Lines whose values agree to this relative tolerance at every n_timesteps are said to coincide.
_COINCIDE = 1e-3
_DPI = 110  # the PNG's resolution (an SVG is resolution-free)


def line_label(library: str, scaling: str, mode: str, *, with_mode: bool) -> str:
    return f"{library} {scaling} {mode}" if with_mode else f"{library} {scaling}"


def unit_roundoff_label(dtype: str, u: float) -> str:
    return f"u ({dtype}) = {u:.2e}"


def error_figure(results: pd.DataFrame, metric: str) -> Figure:
    """Relative error against n_timesteps, log-log, one panel per method × dtype, one line per library × scaling."""
    ran = results[results["status"] != Status.SKIPPED]
    ran, n_seeds = worst_seed(ran, ran[metric])
    styles = _styles(ran)
    with_mode = ran["mode"].nunique() > 1
    fig, axes = _panel_grid(ran)
    groups = dtype_groups(list(ran["dtype"].unique()))
    any_failed = False
    for (method, group), ax in axes.items():
        panel = ran[(ran["method"] == method) & ran["dtype"].isin(groups[group])]
        if len(groups[group]) == 1:
            any_failed |= _error_panel(ax, panel, metric, styles, with_mode)
        else:
            any_failed |= _grouped_panel(ax, panel, "n_timesteps", metric, styles, with_mode)
            _log_axes(ax, panel[metric].dropna(), "n_timesteps", sorted(panel["n_timesteps"].unique()))
            ax.set_ylabel("relative error")
        ax.set_title(f"{method}, {group}")
    fig.suptitle(f"{METRIC_NAMES.get(metric, metric)} error against the float64 reference{worst_seed_words(n_seeds)}")
    _mantissa_colorbar(fig, ran, groups)
    figure_legend(fig, any_failed)
    return fig


def adjoint_range_figure(
    profile: pd.DataFrame, n: int | None = None, results: pd.DataFrame | None = None
) -> Figure | None:
    """Largest adjoint magnitude held in the low dtype per backward step, at `n` (default: the largest n_timesteps),
    against the dtype's range. A non-finite step is marked failed only where `results` say its run failed (without
    `results`, every run is taken as failed there); in a run that ended ok it is marked as an overflow it recovered
    from."""
    backward = profile[profile["phase"] == "backward"] if profile is not None else pd.DataFrame()
    if backward.empty:
        return None
    n = int(backward["n_timesteps"].max()) if n is None else n
    at_n = with_run_status(backward[backward["n_timesteps"] == n], results)
    if at_n.empty:
        return None
    held = at_n["max_abs_low"].fillna(at_n["max_abs"]).where(~non_finite_steps(at_n), math.inf)
    at_n, n_seeds = worst_seed(at_n, held.where(at_n["status"] != Status.FAILED, math.inf))
    styles = _styles(at_n)
    with_mode = at_n["mode"].nunique() > 1
    fig, axes = _panel_grid(at_n)
    groups = dtype_groups(list(at_n["dtype"].unique()))
    marked: set[str] = set()
    for (method, group), ax in axes.items():
        panel = at_n[(at_n["method"] == method) & at_n["dtype"].isin(groups[group])]
        if len(groups[group]) == 1:
            marked |= _adjoint_panel(ax, panel, group, styles, with_mode, backward_steps_label(results))
        else:
            held = panel.assign(held=panel["max_abs_low"].fillna(panel["max_abs"]), broken=non_finite_steps(panel))
            if _grouped_panel(ax, held, "step", "held", styles, with_mode, broken="broken"):
                marked.add(FAILED_LABEL)
            ax.set_yscale("log")
            ax.set_ylim(*_limits(held["held"].dropna()))
            ax.set_xlabel(backward_steps_label(results))
            ax.set_ylabel("largest |adjoint| in the low dtype")
        ax.set_title(f"{method}, {group}" + ax.get_title())
    fig.suptitle(f"largest |adjoint| per backward step, n_timesteps = {n}{worst_seed_words(n_seeds)}")
    _mantissa_colorbar(fig, at_n, groups)
    figure_legend(fig, FAILED_LABEL in marked, recovered=RECOVERED_LABEL in marked)
    return fig


def backward_steps_label(results: pd.DataFrame | None) -> str:
    """The x axis of a backward profile: steps counted from the end of the (first) solve's span."""
    return f"backward step (0 = first step back from t = {span(results)[1]})"


def save(fig: Figure, folder: Path, stem: str) -> Path:
    """PNG (for the report) and SVG beside it, each written atomically; returns the PNG's path."""
    folder.mkdir(parents=True, exist_ok=True)
    _fix_layout(fig)
    for kind, metadata in (("png", None), ("svg", {"Date": None})):  # no date: the same data gives the same SVG
        buffer = io.BytesIO()
        # A fixed salt makes the SVG's element ids, and so the file, the same for the same data.
        with matplotlib.rc_context({"svg.hashsalt": f"roundoff-{stem}"}):
            fig.savefig(buffer, format=kind, dpi=_DPI, metadata=metadata)
        atomic_write_bytes(folder / f"{stem}.{kind}", buffer.getvalue())
    return folder / f"{stem}.png"


def _fix_layout(fig: Figure) -> None:
    """Lay the figure out once and keep that layout for every file saved: with its layout engine left on, each
    `savefig` lays it out again and draws it twice (once only to measure)."""
    fig.set_dpi(_DPI)
    fig.draw_without_rendering()
    # None (not "none", whose placeholder engine still costs the measuring draw); rc settings could name an engine.
    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)


def _styles(runs: pd.DataFrame) -> dict[tuple, dict]:
    """The same library × scaling keeps its colour and marker in every panel; the library sets the line style."""
    keys = [tuple(k) for k in runs[list(LINE_COLUMNS)].drop_duplicates().itertuples(index=False)]
    libraries = list(dict.fromkeys(k[0] for k in keys))
    scalings = list(dict.fromkeys(k[1] for k in keys))
    return {
        key: {
            "color": f"C{i % 10}",
            "linestyle": _LINESTYLES[libraries.index(key[0]) % len(_LINESTYLES)],
            "marker": _MARKERS[scalings.index(key[1]) % len(_MARKERS)],
        }
        for i, key in enumerate(keys)
    }


# Up to this many dtypes get a column of panels each; more are grouped by exponent width, one column per width, so
# that a figure does not grow with the number of formats swept.
PANEL_DTYPES = 4


def dtype_groups(dtypes: list[str]) -> dict[str, list[str]]:
    """Panel column name -> its dtypes: each dtype its own, or for many, one column per exponent width."""
    if len(dtypes) <= PANEL_DTYPES:
        return {d: [d] for d in dtypes}
    groups: dict[str, list[str]] = {}
    for d in sorted(dtypes, key=lambda d: bit_layout(d) or (99, 99)):
        layout = bit_layout(d)
        groups.setdefault(f"{layout[0]} exponent bits" if layout else "other formats", []).append(d)
    return groups


def _mantissa(dtype: str) -> int:
    layout = bit_layout(dtype)
    return layout[1] if layout else 0


def _mantissa_colorbar(fig: Figure, runs: pd.DataFrame, groups: dict[str, list[str]]) -> bool:
    """One colour bar for the mantissa bits of grouped panels; False when no panel is grouped."""
    if all(len(g) == 1 for g in groups.values()):
        return False
    mantissas = [_mantissa(d) for d in runs["dtype"].unique()]
    mappable = ScalarMappable(Normalize(min(mantissas), max(max(mantissas), min(mantissas) + 1)), _MANTISSA_COLOURS)
    fig.colorbar(mappable, ax=fig.axes, label="mantissa bits", shrink=0.8)
    return True


def _grouped_panel(
    ax, panel: pd.DataFrame, x: str, y: str, styles: dict, with_mode: bool, broken: str | None = None
) -> bool:
    """One line per dtype × library × scaling × mode, coloured by the dtype's mantissa bits, styled by its setup;
    a × where a run failed (`broken`: the column that marks a failed point, else the run's status). Per setup, its
    lines are one collection and its points one scatter: a panel of many formats draws and saves in a few artists."""
    mantissas = [_mantissa(d) for d in panel["dtype"].unique()]
    low, high = min(mantissas), max(max(mantissas), min(mantissas) + 1)
    any_failed = False
    for index, (key, setup_runs) in enumerate(panel.groupby(list(LINE_COLUMNS), sort=False)):
        segments, colours, points, point_colours = [], [], [], []
        for dtype, runs in setup_runs.groupby("dtype", sort=False):
            runs = runs.sort_values(x)
            colour = _MANTISSA_COLOURS((_mantissa(dtype) - low) / (high - low))
            drawn = runs[runs[y] > 0]
            if not drawn.empty:  # (a format with no finite value is only marked failed)
                segments.append(list(zip(drawn[x].astype(float), drawn[y].astype(float))))
                colours.append(colour)
                points += segments[-1]
                point_colours += [colour] * len(drawn)
            failed = runs[runs[broken].astype(bool)] if broken else runs[runs["status"] == Status.FAILED]
            if broken:
                failed = failed[failed["status"] == Status.FAILED]
            if not failed.empty:
                any_failed = True
                _mark_failed(ax, failed[x], failed[y], index, colour)
        style = styles[tuple(key)]
        if segments:
            ax.add_collection(
                LineCollection(segments, colors=colours, linestyles=style["linestyle"], linewidths=1), autolim=True
            )
        if points:
            ax.scatter(
                [p[0] for p in points], [p[1] for p in points], c=point_colours, marker=style["marker"], s=9, zorder=3
            )
    for key in panel[list(LINE_COLUMNS)].drop_duplicates().itertuples(index=False):
        # The legend's entry for the setup: its line style in grey (the colour is the mantissa bits, on the colour bar).
        ax.plot([], [], **{**styles[tuple(key)], "color": "0.4"}, label=line_label(*key, with_mode=with_mode))
    return any_failed


def _log_axes(ax, values: pd.Series, x: str, ticks: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(*_limits(values))
    ax.set_xticks(ticks, labels=[str(n) for n in ticks])
    ax.minorticks_off()
    ax.set_xlabel(x)


def _panel_grid(runs: pd.DataFrame):
    methods, dtypes = list(runs["method"].unique()), list(dtype_groups(list(runs["dtype"].unique())))
    # One legend below the panels, so that it never covers a panel or the title.
    width = 6.8 if len(dtypes) <= PANEL_DTYPES else 4.8  # grouped by exponent width: up to seven narrower columns
    fig = Figure(figsize=(max(width * len(dtypes), 9.0), 3.6 * len(methods) + 1.2), layout="constrained")
    grid = fig.subplots(len(methods), len(dtypes), squeeze=False)
    return fig, {(m, d): grid[i][j] for i, m in enumerate(methods) for j, d in enumerate(dtypes)}


def _limits(values: pd.Series, *levels: float) -> tuple[float, float]:
    """Log-axis limits around the finite values and levels, leaving the top of the panel free for failure marks."""
    shown = [float(v) for v in [*values, *levels] if v is not None and 0 < float(v) < math.inf]
    if not shown:  # nothing finite to draw (every run failed): a decade around 1 holds the failure marks
        shown = [0.1, 1.0]
    low, high = min(shown) / 4, max(shown) * 4
    return low, low * (high / low) ** (1 / (1 - _FAILED_BAND))


def _within_view(level: float | None, values: pd.Series) -> bool:
    finite = [float(v) for v in values if v is not None and 0 < float(v) < math.inf]
    if level is None or not finite:
        return level is not None
    return min(finite) / _RANGE_SHOWN <= level <= max(finite) * _RANGE_SHOWN


def _coinciding(lines: dict[tuple, pd.Series]) -> list[tuple[tuple, tuple]]:
    """(line, the earlier line it coincides with) for lines equal to an earlier one at every point."""
    found = []
    keys = list(lines)
    for i, key in enumerate(keys):
        for earlier in keys[:i]:
            a, b = lines[key], lines[earlier]
            if len(a) and a.index.equals(b.index) and all(math.isclose(x, y, rel_tol=_COINCIDE) for x, y in zip(a, b)):
                found.append((key, earlier))
                break
    return found


def _mark_failed(ax, x, values: pd.Series, index: int, color: ColorType, recovered: bool = False) -> None:
    """× (○ for an overflow the run recovered from) at the value where there is one, else in the band at the top of
    the panel (not at a data value)."""
    finite = values.gt(0) & values.lt(float("inf"))
    style = {
        "linestyle": "none",
        "marker": "x",
        "markersize": 9,
        "markeredgewidth": 2,
        "color": color,
        "label": "_failed",
    }
    if recovered:
        style.update(marker="o", fillstyle="none", markersize=6, markeredgewidth=1.2, label="_recovered")
    if finite.any():
        ax.plot(x[finite], values[finite], **style)
    if (~finite).any():
        # The band is in axes coordinates, above every data value; one row per line, so that two setups failing at
        # the same x do not hide each other.
        ax.add_patch(Rectangle((0, 1 - _FAILED_BAND), 1, _FAILED_BAND, transform=ax.transAxes, color="0.93", zorder=0))
        height = 1 - _FAILED_BAND * (0.2 + 0.2 * (index % 4))
        ax.plot(x[~finite], [height] * int((~finite).sum()), transform=ax.get_xaxis_transform(), **style)


def _error_panel(ax, panel: pd.DataFrame, metric: str, styles: dict, with_mode: bool) -> bool:
    u = float(panel["unit_roundoff"].iloc[0])
    dtype = panel["dtype"].iloc[0]
    any_failed = False
    drawn_lines: dict[tuple, pd.Series] = {}
    for index, (key, runs) in enumerate(panel.groupby(list(LINE_COLUMNS), sort=False)):
        runs = runs.sort_values("n_timesteps")
        drawn = runs[runs[metric] > 0]
        drawn_lines[key] = drawn.set_index("n_timesteps")[metric]
        # A line with no finite point still gets its legend entry, so a setup that always failed is not missing.
        ax.plot(drawn["n_timesteps"], drawn[metric], label=line_label(*key, with_mode=with_mode), **styles[key])
        failed = runs[runs["status"] == Status.FAILED]
        if not failed.empty:
            any_failed = True
            _mark_failed(ax, failed["n_timesteps"], failed[metric], index, styles[key]["color"])
    ax.axhline(u, color="black", linewidth=1, linestyle=":", label=unit_roundoff_label(dtype, u))
    timesteps = sorted(panel["n_timesteps"].unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(*_limits(panel[metric].dropna(), u))
    ax.set_xticks(timesteps, labels=[str(n) for n in timesteps])
    ax.minorticks_off()
    ax.set_xlabel("n_timesteps")
    ax.set_ylabel("relative error")
    _note_coinciding(ax, _coinciding(drawn_lines), with_mode)
    return any_failed


def _note_coinciding(ax, pairs: list[tuple[tuple, tuple]], with_mode: bool) -> None:
    if pairs:
        # One pair per line, inside the panel and outside the layout: a long note on one line made constrained
        # layout shrink the panels to nothing (and warn) when many lines coincide.
        text = "\n".join(
            f"{line_label(*a, with_mode=with_mode)} = {line_label(*b, with_mode=with_mode)}" for a, b in pairs
        )
        note = ax.text(
            0.01,
            0.01,
            f"coincide:\n{text}",
            transform=ax.transAxes,
            fontsize="x-small",
            va="bottom",
            color="0.3",
            bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none"},
        )
        note.set_in_layout(False)


def _adjoint_panel(ax, panel: pd.DataFrame, dtype: str, styles: dict, with_mode: bool, xlabel: str) -> set[str]:
    held = panel["max_abs_low"].fillna(panel["max_abs"])
    spec = DTYPES.get(dtype) if dtype in DTYPES else None
    largest = spec.max if spec else None
    normal = spec.smallest_normal if spec else None
    marked = set()
    panel = panel.assign(held=held, broken=non_finite_steps(panel))
    for index, (key, runs) in enumerate(panel.groupby(list(LINE_COLUMNS), sort=False)):
        runs = runs.sort_values("step")
        drawn = runs[runs["held"] > 0]
        ax.plot(
            drawn["step"],
            drawn["held"],
            label=line_label(*key, with_mode=with_mode),
            **{**styles[key], "markersize": 3},
        )
        for recovered, label in ((False, FAILED_LABEL), (True, RECOVERED_LABEL)):
            broken = runs[runs["broken"] & ((runs["status"] != Status.FAILED) == recovered)]
            if not broken.empty:
                marked.add(label)
                _mark_failed(ax, broken["step"], broken["held"], index, styles[key]["color"], recovered)
    for index, (library, runs) in enumerate(panel.groupby("library", sort=False)):
        reference = runs.drop_duplicates("step").sort_values("step")
        ax.plot(
            reference["step"],
            reference["reference_max_abs"],
            color=("0.35", "0.65")[index % 2],
            linewidth=1,
            linestyle=_LINESTYLES[(index + 1) % len(_LINESTYLES)],
            label=f"float64 reference ({library})",
        )
    data = pd.concat([held, panel["reference_max_abs"]]).dropna()
    outside = []
    for level, name, color in ((largest, "max", "red"), (normal, "smallest normal", "orange")):
        if level is None:
            continue
        if _within_view(level, data):
            ax.axhline(level, color=color, linewidth=1, label=f"{dtype} {name} = {level:.3g}")
        else:
            outside.append(f"{name} {level:.3g}")
    ax.set_yscale("log")
    ax.set_ylim(*_limits(data, *[v for v in (largest, normal) if v is not None and _within_view(v, data)]))
    if outside:
        ax.set_title(f"\n({' and '.join(outside)}: off the scale)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("largest |adjoint| in the low dtype")
    _note_coinciding(
        ax,
        _coinciding({k: r.set_index("step")["held"] for k, r in panel.groupby(list(LINE_COLUMNS), sort=False)}),
        with_mode,
    )
    return marked


def figure_legend(fig: Figure, any_failed: bool, recovered: bool = False) -> None:
    """One legend for the figure: each label once, whichever panel drew it first."""
    handles: dict[str, Artist] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if any_failed:
        handles[FAILED_LABEL] = Line2D(
            [], [], linestyle="none", marker="x", color="grey", markeredgewidth=2, label=FAILED_LABEL
        )
    if recovered:
        handles[RECOVERED_LABEL] = Line2D(
            [], [], linestyle="none", marker="o", fillstyle="none", color="grey", label=RECOVERED_LABEL
        )
    fig.legend(
        list(handles.values()), list(handles), fontsize="small", loc="outside lower center", ncols=min(4, len(handles))
    )


def format_search_figure(found: list, threshold: float, unsafe: float) -> Figure:
    """The best setup's parameter-gradient roundoff over the gradient noise against mantissa bits, one line per
    exponent width, with the safe-for-training threshold; a format whose runs failed gets a × in the top band.
    `found`: the format search's FormatResults (one panel, whatever their number)."""
    fig = Figure(figsize=(10.0, 5.2), layout="constrained")
    ax = fig.subplots()
    widths = sorted({f.exponent_bits for f in found})
    values = pd.Series([f.to_noise for f in found], dtype=float)
    any_failed = False
    for index, bits in enumerate(widths):
        formats = sorted((f for f in found if f.exponent_bits == bits), key=lambda f: f.mantissa_bits)
        x = pd.Series([f.mantissa_bits for f in formats])
        y = pd.Series(
            [f.to_noise if f.to_noise is not None and not f.judgement.failures else math.nan for f in formats],
            dtype=float,
        )
        style: dict[str, Any] = {
            "color": f"C{index % 10}",
            "marker": _MARKERS[index % len(_MARKERS)],
            "linestyle": _LINESTYLES[index % len(_LINESTYLES)],
        }
        ax.plot(x, y, label=f"{bits} exponent bits", **style)
        failed = pd.Series([bool(f.judgement.failures) for f in formats])
        if failed.any():
            any_failed = True
            _mark_failed(ax, x[failed].reset_index(drop=True), y[failed].reset_index(drop=True), index, style["color"])
    ax.axhline(
        threshold, color="green", linewidth=1, linestyle="--", label=f"safe for training up to {threshold:g}× the noise"
    )
    ax.axhline(unsafe, color="red", linewidth=1, linestyle=":", label=f"unsafe from {unsafe:g}×")
    ax.set_yscale("log")
    ax.set_ylim(*_limits(values.dropna(), threshold, unsafe))
    mantissas = sorted({f.mantissa_bits for f in found})
    ax.set_xticks(mantissas, labels=[str(m) for m in mantissas])
    ax.set_xlabel("mantissa bits")
    ax.set_ylabel("parameter-gradient roundoff / gradient noise")
    fig.suptitle("format search: the best setup of each format")
    figure_legend(fig, any_failed)
    return fig
