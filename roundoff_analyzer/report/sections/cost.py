"""The cost section: time (forward + backward) and peak memory per setup, against float32 where the sweep ran it."""

from __future__ import annotations

import pandas as pd

from ...axes.scalings import searches_scale, unscaled
from ...measuring.outcomes import Status
from .. import formatting
from ..findings import GRID_COLUMNS, sweep_timesteps
from ..section_inputs import SectionInputs


def section(inputs: SectionInputs) -> list[str]:
    return cost(inputs.results)


def cost(results: pd.DataFrame) -> list[str]:
    """Time (forward + backward) and peak memory per setup; against float32 where the sweep ran it."""
    ok = results[results["status"] == Status.OK].assign(time_s=lambda r: r["time_forward_s"] + r["time_backward_s"])
    if ok["time_s"].isna().all():
        return []
    has_memory = ok["peak_memory_bytes"].notna().any()
    float32 = ok[(ok["dtype"] == "float32") & unscaled(ok["scaling"])].set_index(GRID_COLUMNS + ["mode"])
    rows = []
    for (dtype, library, scaling, _mode), runs in ok.groupby(["dtype", "library", "scaling", "mode"], sort=False):
        cells = [dtype, library, scaling, formatting.value_range(runs["time_s"], lambda v: f"{v:.3g}")]
        if not float32.empty:
            ratios = [
                row.time_s / float32.loc[key, "time_s"].min()
                for row in runs.itertuples()
                if (key := (row.library, row.method, row.n_timesteps, row.mode)) in float32.index
            ]
            cells.append(formatting.value_range(ratios, lambda v: f"{v:.2f}×"))
        if has_memory:
            cells.append(formatting.value_range(runs["peak_memory_bytes"] / 2**20, lambda v: f"{v:.3g}"))
        rows.append(cells)
    headers = ["dtype", "library", "scaling", "forward + backward (s)"]
    headers += ["time / float32"] if not float32.empty else []
    headers += ["peak memory (MiB)"] if has_memory else []
    timesteps = formatting.listing(sweep_timesteps(results))
    note = (
        "against the float32 run of the same library, method, n_timesteps and scaling none"
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
    return [
        "## Cost",
        "",
        "Time of the forward and backward pass of the runs without failure, min – max over n_timesteps "
        f"({timesteps}) and methods; {note}.{memory} Low precision on a CPU is emulated in software and is often "
        "slower than float32: judge speed on the device you will train on.",
        "",
        formatting.bounded_table(rows, headers),
    ]
