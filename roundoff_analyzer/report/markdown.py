"""The report as markdown: a title and scope, then the sections in the order `SECTIONS` lists them; every sentence is
worded from a finding or a table of the results."""

from __future__ import annotations

from ..core.version import __version__
from ..judging.environments import float32_not_ieee, mixed_environments
from . import formatting
from .checkpoint_scope import judged_rows, scope_note
from .placements import placements_as_modes
from .section_inputs import SectionInputs
from .sections import (
    accuracy,
    adjoint_range,
    along_training,
    answer,
    cost,
    discretisation_and_noise,
    key_findings,
    overview,
    per_module,
    recommendations,
    verdict,
    worked_and_failed,
)
from .sweep_folder import SweepFolder

# What a reader acts on comes first; the detail that backs it follows.
SECTIONS = (
    answer,
    verdict,
    key_findings,
    per_module,
    along_training,
    recommendations,
    discretisation_and_noise,
    cost,
    overview,
    accuracy,
    adjoint_range,
    worked_and_failed,
)


def render(sweep: SweepFolder, figures: dict[str, tuple[str, str]]) -> str:
    """The whole report; `figures` maps a figure's name to its PNG and SVG paths relative to the report."""
    every_checkpoint, note = sweep.results, scope_note(sweep.results)
    sweep, _ = judged_rows(sweep)
    judged = sweep.results
    # The answer and the verdict judge each loss placement from its column; the detail reads it as a mode.
    results = placements_as_modes(judged)
    inputs = SectionInputs(sweep, every_checkpoint, judged, results, results["mode"].nunique() > 1, figures)
    model = (sweep.manifest.get("model") or {}).get("name") or formatting.listing(results["model"].unique())
    lines = [
        f"# Roundoff report: {model}",
        "",
        f"Written by roundoff-analyzer {__version__} from `{sweep.path.name}/results.parquet`. Every number in it is "
        "read from that table; errors are relative to a float64 reference solved by the same library on the same time "
        "grid.",
        "",
    ]
    if note:
        lines += [note, ""]
    mixed = mixed_environments(every_checkpoint)
    if mixed:
        lines += [f"**Mixed environments:** {mixed[:1].upper()}{mixed[1:]}.", ""]
    tf32 = float32_not_ieee(every_checkpoint)
    if tf32:
        lines += [f"**float32 is not IEEE float32 here:** {tf32}.", ""]
    narrow = discretisation_and_noise.narrow_reference(sweep.manifest)
    if narrow:
        lines += [narrow, ""]
    for section in SECTIONS:
        written = section.section(inputs)
        if written:
            lines += written + [""]
    return "\n".join(lines).rstrip() + "\n"
