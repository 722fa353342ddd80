"""Which checkpoint the report judges: a sweep over several checkpoints is judged at its last in training, and the
report says so in one sentence."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from . import formatting
from .along_training_findings import checkpoints_in, last_checkpoint
from .sections.along_training import SECTION
from .sweep_folder import SweepFolder


def at_checkpoint(sweep: SweepFolder, checkpoint: str) -> SweepFolder:
    """The sweep folder's tables cut down to one checkpoint's rows."""

    def cut(table: pd.DataFrame | None) -> pd.DataFrame | None:
        if table is None or "checkpoint" not in table.columns:
            return table
        kept = table[table["checkpoint"] == checkpoint].reset_index(drop=True)
        return kept if not kept.empty else None

    return replace(
        sweep,
        results=cut(sweep.results),
        param_errors=cut(sweep.param_errors),
        profile=cut(sweep.profile),
        modules=cut(sweep.modules),
        part_errors=cut(sweep.part_errors),
        timing=cut(sweep.timing),
    )


def judged_rows(sweep: SweepFolder) -> tuple[SweepFolder, str | None]:
    """What the report's other sections judge: a sweep over several
    checkpoints at its last in training, and its name."""
    last = last_checkpoint(sweep.results)
    return (at_checkpoint(sweep, last), last) if last else (sweep, None)


def scope_note(results: pd.DataFrame) -> str | None:
    """One sentence saying which checkpoint the other sections judge; None for a sweep of one set of weights."""
    names, last = checkpoints_in(results), last_checkpoint(results)
    if last is None:
        return None
    iteration = results.loc[results["checkpoint"] == last, "train_iteration"].dropna()
    which = (
        f"the last in training, `{last}` (iteration {int(iteration.iloc[0])})"
        if not iteration.empty
        else (f"the last given, `{last}` (no training iteration is known for it)")
    )
    return (
        f"This sweep ran its grid on {formatting.plural(len(names), 'checkpoint')}; every section but "
        f"[{SECTION}](#{SECTION.lower().replace(' ', '-')}) judges {which}."
    )
