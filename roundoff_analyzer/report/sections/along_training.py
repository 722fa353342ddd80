"""The report's "Along training" section, for a sweep over several checkpoints: the figure, the table of the
parameter-gradient error at each checkpoint, what the errors do as training proceeds, and how the training run
itself ended where its folder says so (`training_summary.parquet`, read as data only)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pandas as pd

from ...core.errors import InputError
from ...storage.table_schemas import read_table
from ...storage.training_summary import SUMMARY_FINDINGS_TABLE
from .. import formatting
from ..along_training_findings import ALONG_TRAINING, STATED_METRIC, TRAINING_METRICS, Trend, movement, trends
from ..figure_data import TRAINING_FIGURE, trend_label, varying_columns
from ..section_inputs import SectionInputs

SECTION = "Along training"
TRAINING_SUMMARY = "training_summary.parquet"


def statements(results: pd.DataFrame, metric: str = STATED_METRIC) -> list[str]:
    """One sentence per setup: whether and where its error grows as training proceeds, in the data's numbers."""
    found = trends(results, metric)
    varying = varying_columns(found)
    return [f"{trend_label(t, varying)}: {_movement(t)}" for t in found]


def _movement(trend: Trend) -> str:
    name = f"{TRAINING_METRICS[trend.metric]} error"
    moved = movement(trend)
    failed = "; failed at " + ", ".join(f"iteration {i} ({c})" for i, c in trend.failed) if trend.failed else ""
    if moved is None:
        return f"{name} measured at fewer than two checkpoints{failed}."
    values = {i: v for i, v in trend.measured}
    first, last = formatting.error(values[moved.first]), formatting.error(values[moved.last])
    if moved.kind in ("grows", "falls"):
        assert moved.steepest is not None  # a trend that grows or falls has its steepest step
        a, b = moved.steepest
        return (
            f"{name} {moved.kind} {formatting.in_u(moved.factor)}× from iteration {moved.first} to {moved.last} "
            f"({first} → {last}), most between {a} and {b}{failed}."
        )
    low, high = formatting.error(min(values.values())), formatting.error(max(values.values()))
    if moved.kind == "stays":
        return (
            f"{name} stays within {formatting.in_u(ALONG_TRAINING)}× from iteration {moved.first} to {moved.last} "
            f"({low} – "
            f"{high}){failed}."
        )
    return (
        f"{name} varies {formatting.in_u(moved.factor)}× between iterations {moved.first} and {moved.last} ({low} – "
        f"{high}) "
        f"but ends within {formatting.in_u(ALONG_TRAINING)}× of where it started ({first} → {last}){failed}."
    )


TABLE_HEADERS = ("iteration", "checkpoint", "parameter gradient error / u", "ratio to first")


def training_table(results: pd.DataFrame) -> str:
    """Per setup and checkpoint, the parameter-gradient error in
    units of u and its ratio to the setup's first checkpoint."""
    found = trends(results, STATED_METRIC)
    varying = varying_columns(found)
    rows = [
        [trend_label(t, varying), str(i), name, formatting.in_u(u), formatting.in_u(r)]
        for t in found
        for i, name, u, r in zip(t.iterations, t.checkpoints, t.over_u, t.ratios)
    ]
    return formatting.markdown_table(rows, ["setup", *TABLE_HEADERS])


def training_summary(manifest: dict, sweep_folder: Path) -> tuple[Path, pd.DataFrame] | None:
    """The `training_summary.parquet` of the train folder the sweep's checkpoints came from, where there is one: at the
    path the manifest records, or, where the folders were moved or cloned since, in the train folder of that name
    beside the sweep's, when the checkpoint there has the bytes the manifest records."""
    for record in manifest.get("checkpoints") or []:
        path = Path(str(record.get("path", ""))) if isinstance(record, dict) else None
        if path is None:
            continue
        # DIR/checkpoints/iter_*.pt, or DIR/setups/<label>/checkpoints/iter_*.pt
        for recorded in (path.parent.parent, path.parent.parent.parent.parent):
            # The train folder beside the sweep's first (a clone reads its own copy, wherever it was run), then the
            # recorded path.
            beside = _moved_beside(sweep_folder, recorded, path, record.get("sha256"))
            folder = beside if beside is not None else recorded
            if folder is not None and (folder / TRAINING_SUMMARY).is_file():
                try:
                    summary = read_table(folder / TRAINING_SUMMARY, SUMMARY_FINDINGS_TABLE)
                except InputError:
                    return None
                return folder / TRAINING_SUMMARY, summary
    return None


def _moved_beside(sweep_folder: Path, folder: Path, checkpoint: Path, sha256: object) -> Path | None:
    beside = Path(sweep_folder).parent / folder.name
    moved = beside / checkpoint.relative_to(folder)
    if not isinstance(sha256, str) or not moved.is_file():
        return None
    return beside if hashlib.sha256(moved.read_bytes()).hexdigest() == sha256 else None


def summary_sentence(path: Path, summary: pd.DataFrame) -> str:
    """How the training setups' final validation losses compared, from the training summary's own numbers."""
    parts = []
    for index, row in enumerate(summary.itertuples(index=False)):
        relative = (
            "the reference"
            if index == 0
            else (
                f"{row.val_loss_rel_to_reference:+.2%} against it"
                if formatting.present(row.val_loss_rel_to_reference)
                else formatting.MISSING
            )
        )
        parts.append(f"{row.setup} {formatting.in_u(row.final_val_loss)} ({relative})")
    # A path, not a link: the train folder may lie outside whatever holds the report (a clone, a copied folder).
    return (
        f"Training itself (`{path.as_posix()}`, relative to this report): final validation loss "
        f"{formatting.listing(parts)}."
    )


def section(inputs: SectionInputs) -> list[str]:
    return along_training_section(inputs.every_checkpoint, inputs.sweep.manifest, inputs.figures, inputs.sweep.path)


def along_training_section(
    results: pd.DataFrame, manifest: dict, figures: dict[str, tuple[str, str]], report_folder: Path
) -> list[str]:
    found = trends(results, STATED_METRIC)
    if not found and TRAINING_FIGURE not in figures:
        return []
    n = found[0].n_timesteps if found else int(results["n_timesteps"].max())
    lines = [
        f"## {SECTION}",
        "",
        f"Each setup's errors at each checkpoint with a training iteration, at n_timesteps = {n} (the sweep's "
        "largest), "
        f"against that checkpoint's own float64 reference. An error grows (falls) along training when it is at least "
        f'{formatting.in_u(ALONG_TRAINING)}× larger (smaller) at the last checkpoint than at the first; "most between" '
        "names the "
        "two consecutive checkpoints between which it moved most that way.",
        "",
    ]
    lines += [f"- {s}" for s in statements(results)]
    if TRAINING_FIGURE in figures:
        png, svg = figures[TRAINING_FIGURE]
        lines += [
            "",
            f"![errors in units of u against the training iteration, n_timesteps = {n}]({png}) ([SVG]({svg}))",
        ]
    if found:
        lines += [
            "",
            f"Parameter-gradient error at n_timesteps = {n}, in units of u, and its ratio to the setup's first "
            "checkpoint:",
            "",
            training_table(results),
        ]
    summary = training_summary(manifest, Path(report_folder))
    if summary is not None:
        path, table = summary
        lines += ["", summary_sentence(Path(os.path.relpath(path.resolve(), Path(report_folder).resolve())), table)]
    return lines
