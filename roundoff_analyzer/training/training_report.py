"""`training_report.md`: answer first (per setup: within 2% of the first setup's validation loss or not, where it
departs, its lost updates and the memory its weights and optimizer state save; then the code of the rounding that
held), then the loss curves side by side and each setup's final losses, time and memory against the first setup's.
Written from the folder's tables and manifest only (reading a folder never runs code from it)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..core.errors import InputError
from ..core.version import __version__
from ..report import formatting
from ..report.figures import save
from ..storage.results import atomic_write_bytes
from ..storage.table_schemas import read_table
from ..storage.training_summary import SUMMARY_TABLE, with_later_columns
from .figure import LOSS_FIGURE, loss_figure
from .folder import FIGURES, LOG, REPORT, SUMMARY, read_manifest
from .log import read_log
from .summary import relative_to
from .training_verdict import COMPARABLE, SetupVerdict, best_low_weights, setup_verdicts, stored_bytes


def write_training_report(root: Path, out: Path | None = None) -> Path:
    """`training_report.md` (or `out`) and its figure under `root/figures/`, from the folder's tables and manifest."""
    root = Path(root)
    manifest = read_manifest(root, "the training report cannot say what was trained") or {}
    missing = [name for name in (LOG, SUMMARY) if not (root / name).is_file()]
    if missing:
        raise InputError(
            f"training folder '{root}' has no {' and no '.join(missing)}: its training has not finished; "
            "run the same `roundoff train` command again to finish it"
        )
    log = read_log(root / LOG)
    summary = with_later_columns(read_table(root / SUMMARY, SUMMARY_TABLE))
    figure = save(loss_figure(log, list(summary["setup"])), root / FIGURES, LOSS_FIGURE)
    path = Path(out) if out is not None else root / REPORT
    text = render(
        manifest,
        summary,
        log,
        Path(os.path.relpath(figure, path.resolve().parent if out is not None else root)).as_posix(),
    )
    atomic_write_bytes(path, text.encode())
    return path


def _percent(value) -> str:
    return f"{100 * value:+.3g}%" if formatting.present(value) else formatting.MISSING


def _ratio(value) -> str:
    return f"{value:.2f}×" if formatting.present(value) else formatting.MISSING


def _mib(value) -> str:
    if not formatting.present(value):
        return formatting.MISSING
    return f"{value / 2**20:.3g} MiB" if value >= 2**20 else f"{value / 2**10:.3g} KiB"


def _fraction(value) -> str:
    return f"{100 * value:.3g}%" if formatting.present(value) else formatting.MISSING


def _size(value) -> str:
    return _mib(value) if not formatting.present(value) or value >= 2**10 else f"{int(value)} B"


def _optimizer(manifest: dict) -> str:
    name = manifest.get("optimizer", "Adam")
    return {"Adam": "Adam", "adam": "Adam", "adamw": "AdamW", "sgd": "SGD with momentum"}.get(
        name, f"the optimizer `{name}`"
    )


def _loss(value) -> str:
    return f"{value:.5g}" if formatting.present(value) else formatting.MISSING


def render(manifest: dict, summary: pd.DataFrame, log: pd.DataFrame, figure: str) -> str:
    reference = summary.iloc[0] if not summary.empty else None
    lines = [
        f"# Training report: {manifest.get('model', '?')}",
        "",
        f"Written by roundoff-analyzer {__version__} from `{LOG}` and `{SUMMARY}`; "
        "every number is read from those tables. Each setup trained the same initial weights on the same batches "
        f"with {_optimizer(manifest)} on its weights (float32 master weights, or weights stored in a low format that "
        "each step is rounded into); relative differences are against the first setup"
        + (f", {_reference(manifest)}." if reference is not None else "."),
        "",
        "## Outcome",
        "",
    ]
    lines += (
        _statements(summary, log, manifest)
        + _answer_code(manifest, summary, log)
        + ["", "## Setups", "", _table(summary), ""]
    )
    lines += [
        "Final loss: the training loss of the last iteration's batch (the same batch for every setup). "
        f"Validation loss: {manifest.get('validation', 'the held-out batches')}, computed the same way for every "
        f"setup. Time: the step alone (forward, backward, the optimizer's update and its rounding into the weights), "
        f"{_how_timed(summary)} Peak memory: one more step's forward and backward, measured apart (CUDA "
        "allocator's peak, or on the CPU the allocator's events from torch.profiler). Lost updates: per step, the "
        "fraction of weight entries whose update was nonzero but left the stored weight unchanged, mean over the steps "
        "(float32 master weights: not measured). Weights + state: the bytes of the weights in their format and of the "
        "optimizer's per-weight state (and compensation buffers) in theirs.",
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


def _reference(manifest: dict) -> str:
    """The setup every comparison is against, named with what it computes in and where its weights live."""
    first = (manifest.get("setups") or [{}])[0]
    weights = first.get("weights", "float32")
    return (
        f"`{first.get('label', '?')}` ({first.get('dtype', '?')} compute on "
        f"{'float32 master' if weights == 'float32' else weights} weights)"
    )


def _statements(summary: pd.DataFrame, log: pd.DataFrame, manifest: dict) -> list[str]:
    if summary.empty:
        return ["No setup has finished an iteration."]
    reference = summary.iloc[0]
    rows = {row.setup: row for row in summary.itertuples(index=False)}
    against = _reference(manifest)
    lines = [
        _verdict_line(verdict, rows[verdict.setup], reference, against) for verdict in setup_verdicts(summary, log)
    ]
    if len(summary) == 1:
        lines.append(
            f"- One setup, `{reference['setup']}`: final validation loss {_loss(reference['final_val_loss'])}."
        )
    if reference["skipped_steps"]:
        lines.append(
            f"- `{reference['setup']}`, the setup the others are compared with: "
            f"{formatting.plural(int(reference['skipped_steps']), 'step')} of {int(reference['iterations'])} skipped "
            "(non-finite gradient)."
        )
    lines += _clipping(summary)
    return lines


def _verdict_line(verdict: SetupVerdict, row, reference: pd.Series, against: str) -> str:
    if verdict.holds is None:
        return f"- `{row.setup}`: no validation loss to compare with that of {against}."
    departs = (
        f"first beyond {COMPARABLE:.0%} of it at iteration {verdict.departs_at}"
        if verdict.departs_at is not None
        else f"never beyond {COMPARABLE:.0%} of it where validated"
    )
    parts = [
        f"- `{row.setup}`: **{'holds' if verdict.holds else 'does not hold'}**, "
        f"final validation loss {_loss(row.final_val_loss)} against {_loss(reference['final_val_loss'])}, that of "
        f"{against}: {_percent(verdict.val_loss_rel)}, {'within' if verdict.holds else 'not within'} "
        f"{COMPARABLE:.0%}; {departs}"
    ]
    if verdict.lost_update_fraction is not None:
        parts.append(f"lost updates {_fraction(verdict.lost_update_fraction)} of weight entries per step")
    if verdict.stored_bytes_rel is not None:
        parts.append(
            f"weights + optimizer state {_size(verdict.stored_bytes)}, "
            f"{_ratio(verdict.stored_bytes_rel)} of the first's"
        )
    parts.append(
        f"time per iteration {_time_ratio(row)}"
        + (
            f", peak memory {_ratio(row.memory_rel_to_reference)}"
            if formatting.present(row.memory_rel_to_reference)
            else ""
        )
    )
    line = "; ".join(parts)
    if row.skipped_steps:
        line += f"; {formatting.plural(int(row.skipped_steps), 'step')} skipped (non-finite gradient)"
    return line + "."


def _interleaved(row) -> bool:
    return formatting.present(row.timing_rounds) and formatting.present(row.time_rel_to_reference)


def _iteration_seconds(row) -> float:
    """The interleaved rounds' median where they were timed; else the training's own mean."""
    return row.interleaved_iter_s if formatting.present(row.interleaved_iter_s) else row.time_per_iter_s


def _time_ratio(row, rounds: bool = True) -> str:
    """Against the first setup's: the median of the interleaved rounds' ratios with their range, or (a summary from
    before them) the ratio of the training's own means."""
    if not _interleaved(row):
        return _ratio(row.time_rel_to_reference)
    spread = f"{row.time_rel_min:.2f}–{row.time_rel_max:.2f}×"
    return f"{_ratio(row.time_rel_to_reference)} ({spread}" + (
        f" over {int(row.timing_rounds)} interleaved rounds)" if rounds else ")"
    )


def _how_timed(summary: pd.DataFrame) -> str:
    interleaved = summary[summary["timing_rounds"].notna()] if not summary.empty else summary
    if interleaved.empty:
        return (
            "mean over the training's iterations; the setups trained one after another, minutes apart, so a change in "
            "the machine's load between them moves the ratios to the first setup's (this folder's summary is from "
            "before the interleaved timing)."
        )
    rounds = int(interleaved["timing_rounds"].max())
    return (
        f"timed after training: each setup ran {rounds} more iterations from its final state on the last batch, one "
        "setup after another in every round, so that a change in the machine's load falls on every setup alike. The "
        "time is the median of a setup's rounds; the ratio to the first setup's is the median of the per-round "
        "ratios, with their range (lowest–highest) in brackets. The training's own mean per iteration, measured one "
        "setup after another and so moved by the load, is `time_per_iter_s` in the summary."
    )


def _clipping(summary: pd.DataFrame) -> list[str]:
    if not summary["clipped_steps"].fillna(0).astype(int).any():
        return []
    counts = ", ".join(
        f"`{r.setup}` {int(r.clipped_steps)} of {int(r.iterations)}" for r in summary.itertuples(index=False)
    )
    return [f"- Clipped (gradient norm above clip_grad_norm): {counts} steps."]


def _answer_code(manifest: dict, summary: pd.DataFrame, log: pd.DataFrame) -> list[str]:
    """The code of the setup with weights in a low format that held, as the training ran it."""
    if summary.empty or (summary["weights"] == "float32").all():
        return []
    best = best_low_weights(summary, setup_verdicts(summary, log))
    if best is None:
        return [
            "",
            f"No setup with weights in a low format held within {COMPARABLE:.0%}: keep float32 master weights "
            f"(`{summary.iloc[0]['setup']}`).",
        ]
    optimizer = (manifest.get("optimizer_description") or "torch.optim.Adam(params, lr)").replace(
        "lr)", f"lr={manifest.get('lr')})"
    )
    clip = manifest.get("clip_grad_norm")
    state_format = best["weights"] if best["optimizer_state"] == "weights" else "float32"
    lines = [
        "",
        f"The rounding that held with the fewest bytes, `{best['setup']}`: weights in {best['weights']}, "
        f"update `{best['update']}`, the optimizer's state in {state_format}, as this training ran it "
        f"(forward and backward in {best['dtype']}, mode {best['mode']}, scaling {best['scaling']}):",
        "",
        "```python",
        "from roundoff_analyzer import StoredWeights",
        "",
        "params = [p for p in func.parameters() if p.requires_grad]",
        f'stored = StoredWeights(params, "{best["weights"]}", "{best["update"]}", '
        f'optimizer_state="{best["optimizer_state"]}", seed=0)'
        f"  # rounds the weights into {best['weights']}",
        f"optimizer = {optimizer}",
        "for batch in batches:",
        "    loss = ...  # forward and backward as the setup computed them",
        "    loss.backward()",
    ]
    if formatting.present(clip):
        lines.append(
            f"    torch.nn.utils.clip_grad_norm_(params, {clip:g})  # on the unscaled gradient (after scaler.unscale_)"
        )
    lines += [
        "    before = stored.before_step()",
        "    optimizer.step()",
        f"    stored.after_step(before, optimizer)  # the step rounded into {best['weights']} ({best['update']})",
        "    optimizer.zero_grad()",
        "```",
    ]
    return lines


def _table(summary: pd.DataFrame) -> str:
    headers = [
        "setup",
        "iterations",
        "skipped",
        "final loss",
        "vs first",
        "final val loss",
        "vs first",
        "lost updates",
        "weights + state",
        "time / iter",
        "vs first",
        "peak memory",
        "vs first",
    ]
    rows = [
        [
            r.setup,
            formatting.integer(r.iterations),
            formatting.integer(r.skipped_steps),
            _loss(r.final_loss),
            _percent(r.loss_rel_to_reference),
            _loss(r.final_val_loss),
            _percent(r.val_loss_rel_to_reference),
            _fraction(r.lost_update_fraction),
            _size(stored_bytes(r)),
            f"{_iteration_seconds(r):.3g} s",
            _time_ratio(r, rounds=False),
            _mib(r.peak_memory_bytes),
            _ratio(r.memory_rel_to_reference),
        ]
        for r in summary.itertuples(index=False)
    ]
    return formatting.markdown_table(rows, headers)


def _along_training(log: pd.DataFrame, setups: list[str]) -> str:
    """The validation loss at every iteration where it was computed, each setup beside the
    first (relative difference)."""
    validated = log[log["val_loss"].notna() & log["setup"].isin(setups)]
    table = validated.pivot_table(index="iteration", columns="setup", values="val_loss", aggfunc="first")
    reference = setups[0]
    headers = ["iteration", reference] + [h for setup in setups[1:] for h in (setup, "vs first")]
    rows = []
    for iteration, values in table.iterrows():
        row = [formatting.integer(iteration), _loss(values.get(reference))]
        for setup in setups[1:]:
            row += [_loss(values.get(setup)), _percent(relative_to(values.get(setup), values.get(reference)))]
        rows.append(row)
    return formatting.markdown_table(rows, headers)


def _overview(manifest: dict) -> list[str]:
    options = ", ".join(f"{k}={v}" for k, v in (manifest.get("options") or {}).items())
    setups = manifest.get("setups") or []
    first = setups[0] if setups else {}
    items = [
        f"- Model `{manifest.get('model')}` ({options}); data: {manifest.get('data_source')}.",
        f"- {manifest.get('iters')} iterations of {_optimizer(manifest)} (lr {manifest.get('lr')}"
        + (
            f", gradient norm clipped to {manifest['clip_grad_norm']:g}"
            if formatting.present(manifest.get("clip_grad_norm"))
            else ""
        )
        + "), a fresh batch each; checkpoints at "
        f"{formatting.listing(manifest.get('save_at') or [])}; {manifest.get('val_batches')} held-out batches.",
        f"- Solves: {first.get('method')} on n_timesteps {first.get('n_timesteps')}, mode {first.get('mode')}; device "
        f"{manifest.get('device')}, {(manifest.get('threads') or {}).get('threads')} torch thread(s).",
    ]
    for entry in manifest.get("left_out") or []:
        items.append(f"- Left out: {entry}.")
    for entry in manifest.get("added") or []:
        items.append(f"- Added: {entry}.")
    return items
