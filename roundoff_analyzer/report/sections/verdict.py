"""The report's first section: per dtype, whether it is safe for this model, and the numbers that decided it."""

from __future__ import annotations

import pandas as pd

from ...axes.scalings import scales
from ...judging import verdict
from ...measuring.draws import grows_with_steps
from .. import formatting, seed_words
from ..along_training_findings import last_checkpoint
from ..section_inputs import SectionInputs
from .discretisation_and_noise import has_fine_reference

VERDICT_ANCHOR = "the-verdict"


def judged(results: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows a verdict or answer judges (a sweep over several checkpoints: its last in training), and the words
    that say so."""
    last = last_checkpoint(results)
    return (results[results["checkpoint"] == last], f"at checkpoint {last}: ") if last else (results, "")


def verdict_lines(results: pd.DataFrame) -> list[str]:
    """One sentence per dtype × library (× mode): the verdict and its numbers; the report's and `roundoff show`'s.
    A sweep over several checkpoints is judged at the last in training, and each sentence says so."""
    rows, at = judged(results)
    found = verdict.verdicts(rows)
    with_mode = len({v.mode for v in found}) > 1
    return [f"{at}{sentence(v, with_mode, _with_loss_in(found))}" for v in found]


def section(inputs: SectionInputs) -> list[str]:
    return verdict_section(inputs.judged, inputs.sweep.manifest.get("problem"))


def verdict_section(results: pd.DataFrame, problem: dict | None = None) -> list[str]:
    """`problem`: the manifest's record of the model (what its draws say of the discretisation error)."""
    found = verdict.verdicts(results)
    if not found:
        return [
            "## Verdict",
            "",
            "Nothing ran (every configuration was skipped), so there is nothing to judge; see the overview.",
        ]
    with_mode = len({v.mode for v in found}) > 1
    with_loss_in = _with_loss_in(found)
    lines = ["## Verdict", ""]
    lines += [
        f"- {item}"
        for item in formatting.bounded_items([sentence(v, with_mode, with_loss_in) for v in found], "more verdicts")
    ]
    lines += ["", _yardsticks(results, found, problem), "", _table(found, with_mode, with_loss_in)]
    return lines


def _with_loss_in(found: list[verdict.Verdict]) -> bool:
    """Whether the sweep formed its loss in more than one place (then each verdict names its placement)."""
    return len({v.loss_in for v in found}) > 1


def loss_words(loss_in: str) -> str:
    return f"loss in {loss_in}"


def label(verdict_label: str) -> str:
    return f"**{verdict_label}**"


def sentence(v: verdict.Verdict, with_mode: bool, with_loss_in: bool = False) -> str:
    mode = (f", {v.mode}" if with_mode else "") + (f", {loss_words(v.loss_in)}" if with_loss_in else "")
    head = f"**{v.dtype}** with {v.library}{mode}: {label(v.label)}."
    chosen, unscaled = v.decided_by, v.unscaled
    if v.label == verdict.NEEDS_SCALING:
        before = describe(unscaled) if unscaled is not None else ""
        # A factor near 1 says nothing worth a word: the scaling rescued failures, not accuracy.
        cut = (
            f" cuts the parameter-gradient error {formatting.in_u(v.reduction)}× and"
            if v.reduction and v.reduction >= 1.5
            else ""
        )
        return f"{head} Without scaling {before}. `{chosen.scaling}`{cut} makes it {chosen.label}: {describe(chosen)}."
    text = (
        f"{head} {'Without scaling' if not scales(chosen.scaling) else f'With `{chosen.scaling}`'}, {describe(chosen)}."
    )
    better = [s for s in v.setups if s is not chosen and scales(s.scaling) and not s.failures]
    if not scales(chosen.scaling) and better:
        factors = [(s, v.cut_by(s)) for s in better]
        strong = [(s, f) for s, f in factors if f is not None and f >= verdict.CUTS]
        if strong:
            s, f = max(strong, key=lambda pair: pair[1])
            text += (
                f" `{s.scaling}` still cuts the parameter-gradient error {formatting.in_u(f)}× (to "
                f"{formatting.error(s.worst_grad)})."
            )
    return text


def describe(j: verdict.SetupJudgement) -> str:
    """What decided one setup's label, in numbers (and, where it differs between seeds, each seed's label)."""
    found = _described(j)
    if j.seeds is not None and j.seeds.differs:
        return f"{found}; {seed_words.labels_by_seed(j)}"
    return found


def _described(j: verdict.SetupJudgement) -> str:
    if j.failures:
        classes = formatting.listing(dict.fromkeys(c for _, _, c in j.failures))
        places = list(dict.fromkeys(f"{m} n = {n}" for m, n, _ in j.failures))  # the same run on several seeds: once
        where = formatting.listing(places[:4]) + (" …" if len(places) > 4 else "")
        return f"{formatting.plural(len(j.failures), 'run')} of {j.n_ran} failed ({classes}: {where})"
    parts = []
    if j.mostly_error is not None:
        e = j.mostly_error
        parts.append(
            f"the {e.quantity} error reaches {e.value:.0%} ({_where(e)}): more error than {e.quantity}, unsafe "
            "whatever the yardsticks say"
        )
    if j.worst_grad is not None:
        in_u = f" ({formatting.in_u(j.worst_grad_over_u)} u)" if j.worst_grad_over_u is not None else ""
        parts.append(f"the parameter-gradient roundoff reaches {formatting.error(j.worst_grad)}{in_u}")
    if j.to_noise is not None:
        parts.append(
            f"{_ratio(j.to_noise.value)} {formatting.noise_at(j.noise_batch_size)} ({_where(j.to_noise)}"
            f"{formatting.near(j.to_noise_near, j.noise_uncertainty)}){seed_words.spread_words(j)}"
        )
    elif not j.noise_known:
        parts.append("the gradient noise is unknown")
    if j.to_disc is not None:
        parts.append(
            f"at most {_ratio(j.to_disc.value)} the discretisation error ({j.to_disc.quantity}, "
            f"{_where(j.to_disc)}){_consequence(j)}"
        )
    if j.unresolved:
        parts.append(
            "the discretisation error is too small to resolve at "
            f"{formatting.listing(f'{m} n = {n}' for m, n in j.unresolved)}"
        )
    return "; ".join(parts) if parts else "no error was measured"


def _consequence(j: verdict.SetupJudgement) -> str:
    """What a roundoff above the discretisation error means: more steps stop paying from the first n where it is."""
    first: dict[str, int] = {}
    for method, _, n in j.roundoff_dominates:
        first[method] = min(first.get(method, n), n)
    if not first:
        return ""
    where = formatting.listing(f"n = {n} with {m}" for m, n in first.items())
    return f", so more steps buy no accuracy in {j.dtype} beyond {where}"


def _at_batch(found: list[verdict.Verdict]) -> str:
    sizes = {j.noise_batch_size for v in found for j in v.setups if j.noise_batch_size}
    return f" at batch {sizes.pop()}" if len(sizes) == 1 else ""


def _ratio(value: float) -> str:
    return f"{formatting.in_u(value)}×"


def _where(worst: verdict.Worst) -> str:
    return f"{worst.method} n = {worst.n_timesteps}" + (f", seed {worst.seed}" if worst.seed is not None else "")


def _yardsticks(results: pd.DataFrame, found: list[verdict.Verdict], problem: dict | None) -> str:
    noise = results["grad_noise_rel"].dropna() if "grad_noise_rel" in results else pd.Series(dtype=float)
    batches = results["grad_noise_batches"].dropna() if "grad_noise_batches" in results else pd.Series(dtype=float)
    size, uncertainty = verdict.noise_batch_size(results), verdict.noise_uncertainty(results)
    noise_text = (
        f"{formatting.noise_at(size)} is {seed_words.noise_value(results, noise)} (relative spread of the float64 "
        "parameter gradient over "
        f"{int(batches.iloc[0])} other batches of the data{f' of {size} points each' if size else ''}"
        + (f", known to {formatting.plus_minus(uncertainty)}" if uncertainty is not None else "")
        + ")"
        if not noise.empty
        else "the gradient noise was not measured (see docs/yardsticks.md: a model needs a batch sampler)"
    )
    near = [j for v in found for j in v.setups if j.to_noise_near is not None]
    if near and not noise.empty and uncertainty is not None:
        drawn = int(batches.iloc[0])
        more = 4 * drawn
        # A standard error falls as 1/sqrt(B − 1): four times the batches about halve it.
        narrowed = uncertainty * ((drawn - 1) / (more - 1)) ** 0.5
        noise_text += (
            f"; {formatting.plural(len(near), 'setup')} {'lies' if len(near) == 1 else 'lie'} within that uncertainty "
            "of a "
            'threshold ("near" in the table, and said in the verdict it decides): `--noise-batches '
            f"{more}` narrows it to about {formatting.plus_minus(narrowed)}"
        )
    if has_fine_reference(results):
        disc_text = "the discretisation error is that float64 run against a fine reference (see below)"
    elif grows_with_steps((problem or {}).get("draws")):
        disc_text = "the discretisation error is not known: the step draws more on a finer grid (see below)"
    else:
        disc_text = "the discretisation error was not measured"
    return (
        f"How to read it: roundoff is the error against the float64 run on the same grid; {noise_text}; {disc_text}. "
        "*safe*: nothing failed and "
        f"every roundoff is at most {verdict.WELL_UNDER:g}× both; *safe for training*: at most {verdict.WELL_UNDER:g}× "
        "the noise but not that far under the discretisation error somewhere; *borderline*: above "
        f"{verdict.WELL_UNDER:g}× the noise; *unsafe*: a failure, or at least {verdict.AT_OR_ABOVE:g}× the noise; "
        "*needs scaling*: a scaling strategy earns a better verdict than none. docs/verdict.md has the rules."
    )


def _table(found: list[verdict.Verdict], with_mode: bool, with_loss_in: bool) -> str:
    rows = []
    for v in found:
        for j in v.setups:
            rows.append(
                [j.dtype, j.library]
                + ([j.mode] if with_mode else [])
                + ([j.loss_in] if with_loss_in else [])
                + [
                    j.scaling,
                    j.label,
                    f"{j.n_ran - len(j.failures)} of {j.n_ran}",
                    formatting.error(j.worst_grad),
                    formatting.in_u(j.worst_grad_over_u),
                    (formatting.in_u(j.to_noise.value) + (f" (near {j.to_noise_near:g})" if j.to_noise_near else ""))
                    if j.to_noise
                    else formatting.MISSING,
                    formatting.in_u(j.to_disc.value) if j.to_disc else formatting.MISSING,
                ]
            )
    headers = (
        ["dtype", "library"]
        + (["mode"] if with_mode else [])
        + (["loss in"] if with_loss_in else [])
        + [
            "scaling",
            "setup",
            "ok",
            "param. gradient roundoff (max)",
            "in u",
            f"roundoff / noise{_at_batch(found)} (max)",
            "roundoff / discretisation (max)",
        ]
    )
    return formatting.bounded_table(rows, headers)
