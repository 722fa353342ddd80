"""The verdict and the answer under a results table, as `roundoff sweep` and `roundoff show` print them."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..core.text import printable


def print_judgement(console: Console, results, folder: Path, shown: int | None = None) -> None:
    """Verdict lines, then per dtype the answer and its code lines, then where an overflow began and the random draws
    every run was given, as the report says them. `shown`: how many rows a filter left in the table above, which the
    verdict and the answer do not judge (they judge the whole sweep, and say so)."""
    from ..core.errors import InputError
    from ..judging.environments import float32_not_ieee, mixed_environments
    from ..judging.manifest_setup import manifest_of, read_setup
    from ..report.sections.answer import answer_lines
    from ..report.sections.overview import random_draws
    from ..report.sections.per_module import overflow_origins
    from ..report.sections.verdict import verdict_lines
    from ..report.sweep_folder import modules_table, read_timing
    from ..storage.manifest_schema import read_manifest

    try:
        timing = read_timing(folder)
    except InputError:  # a damaged timing table costs the answer only its timed cost
        timing = None
    try:
        device = (read_setup(folder) or {}).get("device")
        manifest_path = manifest_of(folder)
        manifest = read_manifest(manifest_path, "the answer cannot say what it judged") if manifest_path else None
    except InputError:  # a manifest that cannot be read only costs the answer its device and what it judged
        device = manifest = None
    if shown is not None:
        console.print(
            f"the verdict and the answer judge the whole sweep ({len(results)} configurations), not only the {shown} "
            "that --where shows",
            highlight=False,
            markup=False,
        )
    mixed = mixed_environments(results)
    if mixed:
        console.print(f"environments: {printable(mixed)}", highlight=False, markup=False, soft_wrap=True)
    tf32 = float32_not_ieee(results)
    if tf32:
        console.print(f"float32: {printable(tf32)}", highlight=False, markup=False, soft_wrap=True)
    for line in verdict_lines(results):
        console.print(f"verdict: {printable(line.replace('**', ''))}", highlight=False, markup=False)
    for line in answer_lines(results, device, manifest, timing):
        prefix = "" if line.startswith(" ") else "answer: "
        console.print(f"{prefix}{printable(line)}", highlight=False, markup=False)
    plain = lambda text: printable(text.replace("**", "").replace("`", ""))  # noqa: E731
    sweep = folder if folder.is_dir() else folder.parent  # a folder, or its results.parquet
    for line in overflow_origins(results, modules_table(sweep)):
        console.print(f"overflow: {plain(line)}", highlight=False, markup=False)
    draws = random_draws(manifest) if manifest else None
    if draws:  # without the report's bold label: the prefix says it
        console.print(f"draws: {plain(draws.split('**: ', 1)[-1])}", highlight=False, markup=False)
