"""`training_report.md`: the loss curves side by side and each setup's final losses, time and memory against the
first setup's. Written from the folder's tables and manifest only (reading a folder never runs code from it)."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..core.errors import InputError
from ..core.version import __version__
from ..report import formatting as fmt
from ..report.figures import save
from ..storage.results import atomic_write_bytes
from ..storage.table_schemas import read_table
from ..storage.training_summary import SUMMARY_TABLE
from . import folder as train_folder
from .figure import LOSS_FIGURE, loss_figure
from .log import read_log
from .summary import relative_to

# The yardstick for "comparable accuracy": a final validation loss within 2% of the reference's.
COMPARABLE = 0.02


def write_training_report(root: Path, out: Path | None = None) -> Path:
    """`training_report.md` (or `out`) and its figure under `root/figures/`, from the folder's tables and manifest."""
    root = Path(root)
    manifest = train_folder.read_manifest(root, "the training report cannot say what was trained") or {}
    missing = [name for name in (train_folder.LOG, train_folder.SUMMARY) if not (root / name).is_file()]
    if missing:
        raise InputError(f"training folder '{root}' has no {' and no '.join(missing)}: its training has not finished; "
                         "run the same `roundoff train` command again to finish it")  # fmt: skip
    log = read_log(root / train_folder.LOG)
    summary = read_table(root / train_folder.SUMMARY, SUMMARY_TABLE)
    figure = save(loss_figure(log, list(summary["setup"])), root / train_folder.FIGURES, LOSS_FIGURE)
    path = Path(out) if out is not None else root / train_folder.REPORT
    text = render(manifest, summary, log, Path(os.path.relpath(figure, path.resolve().parent if out is not None else root)).as_posix())
    atomic_write_bytes(path, text.encode())
    return path


def _percent(value) -> str:
    return f"{100 * value:+.3g}%" if fmt.present(value) else fmt.MISSING


def _ratio(value) -> str:
    return f"{value:.2f}×" if fmt.present(value) else fmt.MISSING


def _mib(value) -> str:
    if not fmt.present(value):
        return fmt.MISSING
    return f"{value / 2**20:.3g} MiB" if value >= 2**20 else f"{value / 2**10:.3g} KiB"


def _loss(value) -> str:
    return f"{value:.5g}" if fmt.present(value) else fmt.MISSING


def render(manifest: dict, summary: pd.DataFrame, log: pd.DataFrame, figure: str) -> str:
    reference = summary.iloc[0] if not summary.empty else None
    lines = [
        f"# Training report: {manifest.get('model', '?')}",
        "",
        f"Written by roundoff-analyzer {__version__} from `{train_folder.LOG}` and `{train_folder.SUMMARY}`; every number is read "
        "from those tables. Each setup trained the same initial weights on the same batches with Adam on float32 master "
        "weights; relative differences are against the first setup"
        + (f", `{reference['setup']}`." if reference is not None else "."),
        "",
        "## Outcome",
        "",
    ]
    lines += _statements(summary) + ["", "## Setups", "", _table(summary), ""]
    lines += [
        "Final loss: the training loss of the last iteration's batch (the same batch for every setup). Validation loss: "
        f"{manifest.get('validation', 'the held-out batches')}, computed the same way for every setup. Time: the step alone "
        "(forward, backward, Adam), mean over the iterations. Peak memory: one more step's forward and backward, "
        "measured apart (CUDA allocator's peak, or on the CPU the allocator's events from torch.profiler).",
        "",
    ]
    if not summary.empty:
        lines += ["## Validation loss along training", "", _along_training(log, list(summary["setup"])), ""]
    lines += [
        "## Loss curves",
        "",
        f"![training and validation loss against the iteration]({figure})",
        "",
        "## Training",
        "",
    ]
    lines += _overview(manifest)
    return "\n".join(lines).rstrip() + "\n"


def _statements(summary: pd.DataFrame) -> list[str]:
    if summary.empty:
        return ["No setup has finished an iteration."]
    reference = summary.iloc[0]
    lines = []
    for row in summary.iloc[1:].itertuples(index=False):
        rel = row.val_loss_rel_to_reference
        if not fmt.present(rel):
            lines.append(f"- `{row.setup}`: no validation loss to compare with `{reference['setup']}`'s.")
            continue
        verdict = "within" if abs(rel) <= COMPARABLE else "not within"
        lines.append(
            f"- `{row.setup}` ends at a validation loss of {_loss(row.final_val_loss)} against {_loss(reference['final_val_loss'])}: "
            f"{_percent(rel)}, {verdict} {COMPARABLE:.0%} of `{reference['setup']}`'s; time per iteration {_ratio(row.time_rel_to_reference)}"
            + (f", peak memory {_ratio(row.memory_rel_to_reference)}" if fmt.present(row.memory_rel_to_reference) else "")
            + (f"; {fmt.plural(int(row.skipped_steps), 'step')} skipped (non-finite gradient)" if row.skipped_steps else "")
            + "."
        )
    if len(summary) == 1:
        lines.append(f"- One setup, `{reference['setup']}`: final validation loss {_loss(reference['final_val_loss'])}.")
    if reference["skipped_steps"]:
        lines.append(f"- `{reference['setup']}`, the setup the others are compared with: "
                     f"{fmt.plural(int(reference['skipped_steps']), 'step')} of {int(reference['iterations'])} skipped (non-finite gradient).")
    return lines


def _table(summary: pd.DataFrame) -> str:
    headers = ["setup", "iterations", "skipped", "final loss", "vs first", "final val loss", "vs first", "time / iter",
               "vs first", "peak memory", "vs first"]  # fmt: skip
    rows = [
        [r.setup, fmt.integer(r.iterations), fmt.integer(r.skipped_steps), _loss(r.final_loss), _percent(r.loss_rel_to_reference),
         _loss(r.final_val_loss), _percent(r.val_loss_rel_to_reference), f"{r.time_per_iter_s:.3g} s", _ratio(r.time_rel_to_reference),
         _mib(r.peak_memory_bytes), _ratio(r.memory_rel_to_reference)]  # fmt: skip
        for r in summary.itertuples(index=False)
    ]
    return fmt.markdown_table(rows, headers)


def _along_training(log: pd.DataFrame, setups: list[str]) -> str:
    """The validation loss at every iteration where it was computed, each setup beside the first (relative difference)."""
    validated = log[log["val_loss"].notna() & log["setup"].isin(setups)]
    table = validated.pivot_table(index="iteration", columns="setup", values="val_loss", aggfunc="first")
    reference = setups[0]
    headers = ["iteration", reference] + [h for setup in setups[1:] for h in (setup, "vs first")]
    rows = []
    for iteration, values in table.iterrows():
        row = [fmt.integer(iteration), _loss(values.get(reference))]
        for setup in setups[1:]:
            row += [_loss(values.get(setup)), _percent(relative_to(values.get(setup), values.get(reference)))]
        rows.append(row)
    return fmt.markdown_table(rows, headers)


def _overview(manifest: dict) -> list[str]:
    options = ", ".join(f"{k}={v}" for k, v in (manifest.get("options") or {}).items())
    setups = manifest.get("setups") or []
    first = setups[0] if setups else {}
    items = [
        f"- Model `{manifest.get('model')}` ({options}); data: {manifest.get('data_source')}.",
        f"- {manifest.get('iters')} iterations of Adam (lr {manifest.get('lr')}), a fresh batch each; checkpoints at "
        f"{fmt.listing(manifest.get('save_at') or [])}; {manifest.get('val_batches')} held-out batches.",
        f"- Solves: {first.get('method')} on n_timesteps {first.get('n_timesteps')}, mode {first.get('mode')}; device "
        f"{manifest.get('device')}, {(manifest.get('threads') or {}).get('threads')} torch thread(s).",
    ]
    for entry in manifest.get("left_out") or []:
        items.append(f"- Left out: {entry}.")
    return items
