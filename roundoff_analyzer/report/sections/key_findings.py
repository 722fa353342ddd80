"""The key findings section: each failure group with its count, message, cause and remedy; what scaling rescued."""

from __future__ import annotations

import pandas as pd

from ...axes.scalings import unscaled
from ...measuring.outcomes import FailureClass, Status
from .. import formatting, seed_words, tables
from ..causes import explain
from ..findings import (
    SETUP_COLUMNS,
    FailureGroup,
    GrowthGroup,
    Rescue,
    failure_groups,
    growth_groups,
    largest_error,
    overflow_progressions,
    rescues,
    without_step,
)
from ..recovered import recovered_paragraph
from ..section_inputs import SectionInputs

RESCUE_HEADING = "Which scaling rescued which dtype"
RESCUE_ANCHOR = "#which-scaling-rescued-which-dtype"


def section(inputs: SectionInputs) -> list[str]:
    return key_findings(inputs.results, inputs.sweep.manifest, inputs.with_mode, inputs.sweep.profile)


def key_findings(
    results: pd.DataFrame, manifest: dict, with_mode: bool, profile: pd.DataFrame | None = None
) -> list[str]:
    groups = failure_groups(results)
    ran = results[results["status"] != Status.SKIPPED]
    if groups:
        counts = ", ".join(f"{g.count} {g.failure_class}" for g in groups)
        summary = (
            f"{len(groups)} failure {'group' if len(groups) == 1 else 'groups'} among {len(ran)} configurations that "
            f"ran{seed_words.over_initialisations(results)}: {counts}."
        )
    else:
        skipped = len(results) - len(ran)
        summary = (
            f"No configuration failed: all {len(ran)} that ran{seed_words.over_initialisations(results)} gave finite "
            "solutions and gradients"
        ) + (f" ({formatting.plural(skipped, 'configuration')} skipped, see the overview)." if skipped else ".")
    lines = ["## Key findings", "", summary]
    recovered = recovered_paragraph(profile, results, with_mode)
    lines += [""] + recovered if recovered else []
    largest = largest_error(results)
    several = seed_words.several(results)
    if largest is not None:
        mode = f" {largest['mode']}" if with_mode else ""
        lines += [
            "",
            "**Largest parameter-gradient roundoff** of a run without failure: "
            f"{formatting.error(largest['grad_params_rel_err'])} "
            f"({formatting.in_u(largest['grad_params_rel_err_over_u'])} u), "
            f"{largest['dtype']} {largest['library']} {largest['method']} scaling {largest['scaling']}{mode} at n = "
            f"{int(largest['n_timesteps'])}{seed_words.of_seed(int(largest['seed']) if several else None)}.",
        ]
    lines += error_growth(results, with_mode)
    for paragraph in dtype_comparison(results):
        lines += ["", paragraph]
    found_rescues = rescues(results)
    for number, group in enumerate(groups, start=1):
        lines += [""] + failure_group(number, group, results, manifest, with_mode, bool(found_rescues))
    if found_rescues:
        lines += ["", f"### {RESCUE_HEADING}", ""] + [f"- {rescue_sentence(r, with_mode)}" for r in found_rescues]
    return lines


GROWTH_SHOWN = 3  # growth findings worded here; the accuracy section's table has every setup


def error_growth(results: pd.DataFrame, with_mode: bool) -> list[str]:
    groups = growth_groups(results)
    if not groups:
        return []
    lines = ["", "**Error growth with n_timesteps**, the steepest first:", ""]
    lines += [f"- {growth_sentence(g, with_mode)}" for g in groups[:GROWTH_SHOWN]]
    if len(groups) > GROWTH_SHOWN:
        rest = len(groups) - GROWTH_SHOWN
        lines.append(
            f"- {formatting.plural(rest, 'more group')} of setups grow{'s' if rest == 1 else ''} less; the accuracy "
            "section "
            "has every setup's ratio."
        )
    return lines


def growth_sentence(group: GrowthGroup, with_mode: bool) -> str:
    first = group.members[0]
    scalings = list(dict.fromkeys(dict(zip(SETUP_COLUMNS, g.setup))["scaling"] for g in group.members))
    mode = f" {group.mode}" if with_mode else ""
    factors = formatting.value_range([g.factor for g in group.members], formatting.in_u)
    ends = formatting.value_range([g.values[-1] for g in group.members], formatting.error)
    starts = formatting.value_range([g.values[0] for g in group.members], formatting.error)
    return (
        f"{group.dtype} {group.library} {group.method}{mode} (scaling {formatting.either(scalings)}"
        f"{seed_words.of_seeds(group.seeds)}): the "
        f"parameter-gradient error grows {factors}× from n = {first.timesteps[0]} to n = {first.timesteps[-1]} "
        f"({starts} → {ends})."
    )


def failure_group(
    number: int, group: FailureGroup, results: pd.DataFrame, manifest: dict, with_mode: bool, rescued: bool
) -> list[str]:
    explanation = explain(group, manifest)
    kind = f"{group.failure_type}: " if group.failure_type else ""
    message_note = (
        " (the numbers differ between runs; each run's message is in the table)" if group.messages_differ else ""
    )
    stepped = [m for m in group.rows["failure_message"].dropna() if without_step(m) != m]
    if stepped and not group.messages_differ:
        message_note = (
            f" (where the step is known it ends with it, e.g. `{stepped[0][len(without_step(stepped[0])) :].strip()}`)"
        )
    lines = [
        f"### {number}. {group.failure_class}: {formatting.plural(group.count, 'configuration')}",
        "",
        f"Message{message_note}:",
        "",
        "```text",
        (kind + group.message).replace("```", "'''"),
        "```",
        "",
        tables.failure_group_table(group, results, with_mode),
        "",
    ]
    lines += overflow_steps(group, with_mode, seed_words.several(results))
    lines += [f"**Cause.** {explanation.cause}", "", f"**What to do.** {explanation.remedy}"]
    if (
        rescued
        and group.failure_class in (FailureClass.OVERFLOW, FailureClass.UNDERFLOW)
        and unscaled(group.rows["scaling"]).any()
    ):
        lines[-1] += f" What each scaling did in this sweep: [{RESCUE_HEADING.lower()}]({RESCUE_ANCHOR})."
    return lines


def overflow_steps(group: FailureGroup, with_mode: bool, several: bool = False) -> list[str]:
    if group.failure_class != FailureClass.OVERFLOW:
        return []
    lines = []
    progressions = overflow_progressions(group.rows, several)
    if progressions:
        t1 = formatting.span(group.rows)[1]
        lines += [
            f"**Overflow step by n_timesteps** (backward steps count from t = {t1} as the solver walks back):",
            "",
        ]
        for p in progressions:
            steps = ", ".join(f"step {s} at n = {n}" for n, s in p.steps)
            said = ", ".join(part for part in (p.phase, seed_words.of_seed(p.seed, "")) if part)
            lines.append(f"- {formatting.setup_label(p.setup, with_mode)}{f' ({said})' if said else ''}: {steps}")
        lines.append("")
    unknown = group.rows[group.rows["overflow_step"].isna()] if "overflow_step" in group.rows else group.rows
    if len(unknown):
        libraries = formatting.listing(unknown["library"].unique())
        lines += [f"The step is not recorded for {len(unknown)} of these runs ({libraries}).", ""]
    return lines


def rescue_sentence(rescue: Rescue, with_mode: bool) -> str:
    mode = f" ({rescue.mode})" if with_mode else ""
    failed_at = formatting.listing(n for n, _ in rescue.failed_without)
    classes = formatting.listing(dict.fromkeys(c for _, c in rescue.failed_without))
    text = (
        f"**{rescue.dtype}**, {rescue.library} {rescue.method}{mode}{seed_words.of_seed(rescue.seed, ' on ')}: without "
        f"scaling it failed at n = {failed_at} "
        f"({classes})"
    )
    parts = [f"`{s}` worked at n = {formatting.listing(n)}" for s, n in rescue.rescued_by.items()]
    parts += [f"`{s}` failed too at n = {formatting.listing(n)}" for s, n in rescue.failed_with.items()]
    if not parts:
        return text + "; no other scaling was run there."
    return text + "; " + "; ".join(parts) + "."


def dtype_comparison(results: pd.DataFrame) -> list[str]:
    ok = results[(results["status"] == Status.OK) & results["grad_params_rel_err"].notna()]
    if ok["dtype"].nunique() < 2:
        return []
    spans = {d: runs for d, runs in ok.groupby("dtype", sort=False)}
    described = "; ".join(
        formatting.bounded_items(
            [
                f"{d} {formatting.value_range(r['grad_params_rel_err'], formatting.error)} "
                f"({formatting.value_range(r['grad_params_rel_err_over_u'], formatting.in_u)} u)"
                for d, r in spans.items()
            ],
            "more dtypes",
        )
    ).rstrip(".")
    text = (
        f"**Which dtype**: parameter-gradient errors of the runs without failure"
        f"{seed_words.over_initialisations(results, ', ')}: {described}."
    )
    ranked = sorted(spans, key=lambda d: spans[d]["grad_params_rel_err"].max())
    first, second = ranked[0], ranked[1]
    if spans[first]["grad_params_rel_err"].max() < spans[second]["grad_params_rel_err"].min():
        text += f" Every {first} run that worked is more accurate than every {second} run."
    return [text]
