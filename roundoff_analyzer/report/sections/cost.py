"""The cost section: time (forward + backward) and peak memory per setup, against float32 where the sweep ran it; and
the setups the answer compares, timed again after the sweep, interleaved (timing.parquet), where the folder has them."""

from __future__ import annotations

import pandas as pd

from ...axes.scalings import searches_scale, unscaled
from ...execution.timing_pass import TIME_SHARE
from ...judging import backward_modes, timed_cost
from ...measuring.outcomes import Status
from .. import formatting, seed_words
from ..findings import GRID_COLUMNS, sweep_timesteps
from ..section_inputs import SectionInputs


def section(inputs: SectionInputs) -> list[str]:
    return cost(inputs.results, inputs.sweep.timing, inputs.sweep.manifest)


def cost(results: pd.DataFrame, timing: pd.DataFrame | None = None, manifest: dict | None = None) -> list[str]:
    """Time (forward + backward) and peak memory per setup; against float32 where the sweep ran it. Where the folder has
    a timing table, a column says which rows were timed again, and a table after says what that timing found."""
    ok = results[results["status"] == Status.OK].assign(time_s=lambda r: r["time_forward_s"] + r["time_backward_s"])
    if ok["time_s"].isna().all():
        return []
    has_memory = ok["peak_memory_bytes"].notna().any()
    has_modes = bool(backward_modes.modes(ok))
    # Each run against the float32 run of its own initialisation, where the sweep ran several.
    keys = seed_words.grid_columns(results, [*GRID_COLUMNS, "mode"])
    float32 = ok[(ok["dtype"] == "float32") & unscaled(ok["scaling"])].set_index(keys)
    timed = timed_cost.timed_setups(timing) if timing is not None else []
    rows = []
    for (dtype, library, scaling, _mode), runs in ok.groupby(["dtype", "library", "scaling", "mode"], sort=False):
        cells = [dtype, library, scaling, formatting.value_range(runs["time_s"], lambda v: f"{v:.3g}")]
        if not float32.empty:
            ratios = [
                row["time_s"] / float32.loc[key, "time_s"].min()
                for _, row in runs.iterrows()
                if (key := tuple(row[k] for k in keys)) in float32.index
            ]
            cells.append(formatting.value_range(ratios, lambda v: f"{v:.2f}×"))
        if has_memory:
            cells.append(formatting.value_range(runs["peak_memory_bytes"] / 2**20, lambda v: f"{v:.3g}"))
        if has_modes:
            cells.append(backward_modes.said(backward_modes.modes(runs)) or formatting.MISSING)
        if timing is not None:
            cells.append(_repeated(runs, timed, timing, seed_words.several(results)))
        rows.append(cells)
    headers = ["dtype", "library", "scaling", "forward + backward (s)"]
    headers += ["time / float32"] if not float32.empty else []
    headers += ["peak memory (MiB)"] if has_memory else []
    headers += ["native backward"] if has_modes else []
    headers += ["timed again"] if timing is not None else []
    timesteps = formatting.listing(sweep_timesteps(results))
    over = f", methods{seed_words.over_seeds(results)}" if seed_words.several(results) else " and methods"
    note = (
        f"against the float32 run of the same library, method, n_timesteps{', seed' if 'seed' in keys else ''} and "
        "scaling none"
        if not float32.empty
        else "this sweep has no float32 run to compare with (add `--dtype float32` for the ratio)"
    )
    memory = "" if has_memory else " Peak memory was not recorded on this device."
    if ok["scaling"].map(searches_scale).any():
        memory += (
            " `grad`'s times include the search for its loss scale: extra backward passes at other scales, to find "
            "the largest whose gradients are finite (`scale_retries` backoffs from the initial scale), where "
            "training with a GradScaler runs one backward pass per step."
        )
    memory += _mixed_modes(ok) if has_modes else ""
    once = " Each run was timed once, while the sweep ran." if timing is not None else ""
    return [
        "## Cost",
        "",
        "Time of the forward and backward pass of the runs without failure, min – max over n_timesteps "
        f"({timesteps}){over}; {note}.{memory}{once} Low precision on a CPU is emulated in software and is often "
        "slower than float32: judge speed on the device you will train on.",
        "",
        formatting.bounded_table(rows, headers),
        *(timed_lines(timing, manifest or {}, seed_words.several(results)) if timing is not None else []),
    ]


def _mixed_modes(ok: pd.DataFrame) -> str:
    """Where one library's native runs did not all take the same backward (an emulated dtype recomputes from the stored
    states where float32 on hardware keeps the stages): which did which, so that a ratio does not compare them
    silently."""
    text = ""
    for library, runs in ok.groupby("library", sort=False):
        by_dtype = {dtype: backward_modes.modes(rows) for dtype, rows in runs.groupby("dtype", sort=False)}
        ran = {mode for modes in by_dtype.values() for mode in modes}
        if len(ran) > 1:
            said = "; ".join(f"{dtype}: {backward_modes.said(modes)}" for dtype, modes in by_dtype.items() if modes)
            text += (
                f" {library}'s runs did not all take the same backward ({said}): their time and memory against float32 "
                "compare the two backwards, not only the dtypes."
            )
    return text


def _repeated(runs: pd.DataFrame, timed: list[dict], timing: pd.DataFrame, several: bool) -> str:
    """Which of the group's runs the timing pass timed again, and how often: 'rk4, n 32: 7 repeats' (', seed 1' where
    the sweep ran several initialisations)."""
    said = []
    for config in timed:
        match = runs
        for column, value in config.items():
            match = match[match[column] == value] if column in match else match
        if not match.empty:
            rounds = timed_cost.setup_rounds(timing, config)
            count = len(rounds) if rounds is not None else 0
            seed = seed_words.of_seed(int(config["seed"]) if several else None)
            said.append(f"{config['method']}, n {config['n_timesteps']}{seed}: {count} repeats")
    return "; ".join(said) or "no"


def timed_lines(timing: pd.DataFrame, manifest: dict, several: bool = False) -> list[str]:
    """The setups the answer compares, timed again after the sweep: each one's median and range, and its per-round
    ratio to float32 with the same library where that was timed (`several`: the sweep ran several initialisations,
    the pass timed one, and says which)."""
    rows = []
    for config in timed_cost.timed_setups(timing):
        rounds = timed_cost.setup_rounds(timing, config)
        assert rounds is not None  # the table holds it
        seconds = timed_cost.spread(rounds["seconds"])
        plain = timed_cost.float32_of(config)
        ratio = timed_cost.per_round_ratio(rounds, timed_cost.setup_rounds(timing, plain)) if plain != config else None
        load = rounds["load_average_1m"].dropna()
        rows.append(
            [
                config["dtype"],
                config["library"],
                config["scaling"],
                config["method"],
                config["n_timesteps"],
                _median_range(seconds, ".3g"),
                _median_range(ratio, ".2f", "×") if ratio is not None else formatting.MISSING,
                len(rounds),
                formatting.value_range(load, lambda v: f"{v:.1f}"),
            ]
        )
    spent, of = manifest.get("timing_pass_s"), manifest.get("timing_sweep_s")
    took = (
        f" The pass took {spent:.3g} s, {spent / of:.0%} of the sweep's {of:.0f} s (from planning to its tables)."
        if isinstance(spent, (int, float)) and isinstance(of, (int, float)) and of > 0
        else ""
    )
    return [
        "",
        "Timed again after the sweep, for the answer: its choice and float32 with the same library, method and "
        f"n_timesteps, then as many as fit in {TIME_SHARE:.0%} of the sweep's time of float32 with torchdiffeq "
        "(where the choice runs the native solver) and the runner-up; forward + backward, interleaved (each round "
        "runs every setup "
        "once, so that a change of load falls on all alike); median "
        f"(min – max) over the rounds, the ratio to float32 taken round by round; the load is the 1-minute load "
        f"average as each round began.{took}{_timed_seed(timing) if several else ''}",
        "",
        formatting.markdown_table(
            rows,
            [
                "dtype",
                "library",
                "scaling",
                "method",
                "n_timesteps",
                "forward + backward (s)",
                "time / float32",
                "repeats",
                "load",
            ],
        ),
    ]


def _timed_seed(timing: pd.DataFrame) -> str:
    """Which initialisation the pass timed, of a sweep over several: it times every setup on the choice's."""
    seed = timed_cost.timed_seed(timing)
    return (
        f" Every setup was {seed_words.timed_on(seed)}: the pass times one of the sweep's initialisations."
        if seed is not None
        else ""
    )


def _median_range(s: timed_cost.Spread, spec: str, unit: str = "") -> str:
    low, high = format(s.low, spec), format(s.high, spec)
    return f"{s.median:{spec}}{unit} ({low if low == high else f'{low} – {high}'})"
