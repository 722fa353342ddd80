"""The format search in words: the narrowest format safe for training, the narrowest exponent width that never
overflows, each with its numbers, and one compact table of every emulated format (exponent bits × mantissa bits)."""

from __future__ import annotations

import pandas as pd

from ..judging import format_search, verdict
from . import formatting

FORMAT_FIGURE = "format_search"
# Up to this many emulated formats keep a sentence each in the answer; more are summarised by the search.
FEW_FORMATS = 3


def summarised(found: list[format_search.FormatResult]) -> set[str]:
    """The dtypes the format search summarises: the emulated formats, when there are more than a few."""
    formats = format_search.emulated(found)
    return {f.dtype for f in formats} if len(formats) > FEW_FORMATS else set()


def layout(f: format_search.FormatResult) -> str:
    return f"{f.bits} bits: {f.exponent_bits} exponent, {f.mantissa_bits} mantissa"


def _setup(j: verdict.SetupJudgement) -> str:
    return f"{j.library}, {formatting.scaling_words(j.scaling)}, `{j.mode}`"


def _to_noise(f: format_search.FormatResult) -> str:
    """The format's best setup's label and ratio to the noise, 'at best' (and how sure, near a threshold)."""
    if f.judgement.failures:
        classes = formatting.listing(dict.fromkeys(c for _, _, c in f.judgement.failures))
        return f"{f.judgement.label}: {formatting.plural(len(f.judgement.failures), 'run')} failed ({classes}) at best"
    if f.to_noise is None:
        return f"{f.judgement.label}: gradient noise not measured"
    j = f.judgement
    near = formatting.near(j.to_noise_near, j.noise_uncertainty, lead="")
    return f"{j.label}: {formatting.in_u(f.to_noise)}× {formatting.noise_at(j.noise_batch_size)} at best" + (
        f" ({near})" if near else ""
    )


def _near_ones(found: list[format_search.FormatResult], said: set[str]) -> str:
    """The formats (beyond those `said`) whose ratio to the noise lies within its uncertainty of a threshold."""
    near = [f for f in format_search.emulated(found) if f.judgement.to_noise_near is not None and f.dtype not in said]
    if not near:
        return ""
    uncertainty = near[0].judgement.noise_uncertainty or 0.0
    listed = formatting.listing(f"{f.dtype} ({formatting.in_u(f.to_noise)}×, {f.judgement.label})" for f in near)
    return (
        f" Within the noise's {formatting.plus_minus(uncertainty)} of a threshold, so that another draw of its "
        "batches could "
        f"label them otherwise: {listed}."
    )


def narrowest_safe_line(found: list[format_search.FormatResult]) -> str:
    best = format_search.narrowest_safe(found)
    if best is None:
        closest = min(
            found,
            key=lambda f: (verdict.RANK[f.judgement.label], f.to_noise if f.to_noise is not None else float("inf")),
        )
        return (
            f"**No format swept is safe for training.** The closest, {closest.dtype} ({layout(closest)}), is "
            f"{_to_noise(closest)}, with {_setup(closest.judgement)}."
        )
    ruled_out = format_search.narrower_unsafe(found, best)
    narrower, said = "", {best.dtype}
    if ruled_out:
        # The nearest miss: of the widest formats ruled out, the one with the smallest roundoff against the noise.
        nearest = max(
            ruled_out,
            key=lambda f: (
                f.bits,
                -(f.to_noise if f.to_noise is not None and not f.judgement.failures else float("inf")),
            ),
        )
        narrower = (
            f" Every narrower format swept ({formatting.plural(len(ruled_out), 'format')}) is not: the nearest miss, "
            f"{nearest.dtype} ({layout(nearest)}), is {_to_noise(nearest)}."
        )
        said.add(nearest.dtype)
    elif not any(f.bits < best.bits for f in found):
        narrower = " No narrower format was swept."
    j = best.judgement
    margin = (
        f", {formatting.in_u(verdict.WELL_UNDER / best.to_noise)}× under the threshold"
        + (
            f" with the noise known to {formatting.plus_minus(j.noise_uncertainty)}"
            if j.noise_uncertainty is not None
            else ""
        )
        if best.to_noise
        else ""
    )
    return (
        f"**Narrowest format safe for training: {best.dtype}** ({layout(best)}), with {_setup(j)}: its "
        f"parameter-gradient roundoff is at most {formatting.in_u(best.to_noise)}× "
        f"{formatting.noise_at(j.noise_batch_size)} (safe "
        f"for training up to {verdict.WELL_UNDER:g}×{margin}{formatting.near(j.to_noise_near, j.noise_uncertainty)}), "
        f"{formatting.error(j.worst_grad)} relative ({formatting.in_u(j.worst_grad_over_u)} "
        f"u).{narrower}{_near_ones(found, said)}"
    )


def exponent_line(widths: list[format_search.ExponentWidth]) -> str:
    clear = format_search.narrowest_without_overflow(widths)
    overflowing = [w for w in widths if w.overflows]
    counts = "; ".join(f"{w.exponent_bits} bits: {w.n_overflows} of {w.n_runs} runs" for w in overflowing)
    if clear is None:
        return f"**Every exponent width swept overflowed somewhere** ({counts})."
    headroom = (
        f"; its largest finite adjoint stays {formatting.in_u(clear.headroom)}× below the format's largest number"
        if clear.headroom
        else ""
    )
    text = (
        f"**Narrowest exponent width that never overflows: {clear.exponent_bits} bits** (none of the "
        f"{clear.n_runs} runs of its {formatting.plural(len(clear.formats), 'format')} overflowed{headroom})."
    )
    return text + (f" Narrower widths overflowed ({counts})." if overflowing else " No narrower width was swept.")


def format_table(found: list[format_search.FormatResult]) -> str:
    """Rows: exponent bits; columns: mantissa bits; each cell the best setup's roundoff over the noise."""
    formats = format_search.emulated(found)
    best = format_search.narrowest_safe(formats)
    mantissas = sorted({f.mantissa_bits for f in formats})
    by_layout = {(f.exponent_bits, f.mantissa_bits): f for f in formats}
    rows = []
    for e in sorted({f.exponent_bits for f in formats}):
        cells = [_cell(by_layout.get((e, m)), best) for m in mantissas]
        rows.append([f"e{e}"] + cells)
    return formatting.markdown_table(rows, ["exponent \\ mantissa"] + [f"m{m}" for m in mantissas])


def _cell(f: format_search.FormatResult | None, best: format_search.FormatResult | None) -> str:
    if f is None:
        return ""
    if f.judgement.failures:
        return f"✗ {f.judgement.failures[0][2]}"
    text = formatting.in_u(f.to_noise) if f.to_noise is not None else formatting.MISSING
    if f.judgement.to_noise_near is not None:
        text += " †"
    if not f.trainable:
        return f"✗ {text}"
    return f"**{text}**" if f is best else text


def format_search_lines(
    results: pd.DataFrame, found: list[format_search.FormatResult], figures: dict[str, tuple[str, str]]
) -> list[str]:
    formats = format_search.emulated(found)
    if len(formats) <= FEW_FORMATS:
        return []
    lines = [
        f"### Formats emulated: {formatting.plural(len(formats), 'format')}",
        "",
        f"- {narrowest_safe_line(found)}",
        f"- {exponent_line(format_search.exponent_widths(results))}",
        "",
        "Each format is judged by its best setup (library, scaling, mode). A cell is that setup's largest "
        "parameter-gradient roundoff over the gradient noise; ✗ marks a format not safe for training (above "
        f"{verdict.WELL_UNDER:g}×, or a run failed: its failure class), bold the narrowest safe one, † a ratio within "
        "the noise's uncertainty of a threshold. Every run is in the Parquet (`roundoff show`).",
        "",
        format_table(found),
    ]
    if FORMAT_FIGURE in figures:
        png, svg = figures[FORMAT_FIGURE]
        lines += [
            "",
            f"![parameter-gradient roundoff over the gradient noise against mantissa bits]({png}) ([SVG]({svg}))",
        ]
    return lines


def format_search_terminal(results: pd.DataFrame, found: list[format_search.FormatResult]) -> list[str]:
    """The terminal's form: the two lines of the search, without the table."""
    if len(format_search.emulated(found)) <= FEW_FORMATS:
        return []
    return [narrowest_safe_line(found), exponent_line(format_search.exponent_widths(results))]
