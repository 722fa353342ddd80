"""The report's words: each term the answer and the verdict use, defined where the tables use it."""

from __future__ import annotations

import pandas as pd

from ...axes.models.problem import recorded_as_step
from ...measuring.contract import record_words
from ...measuring.outcomes import Status
from ...measuring.torchdiffeq_routing import RoutedSolves, routed_words
from .. import formatting


def glossary(results: pd.DataFrame, problem: dict | None = None) -> list[str]:
    """One sentence for each word of the report a reader may not know, for the words this sweep uses (`problem`: the
    manifest's record of the model's form)."""
    ran = results[results["status"] != Status.SKIPPED]
    units = formatting.unit_roundoffs(ran, "in")
    words = [
        "**roundoff**: the error of a low-precision run against the float64 run of the same library on the same "
        "time grid.",
        f"**u** (unit roundoff): the largest relative error of rounding one number to the dtype ({units}); an error "
        "of 10 u is what ten such roundings can add up to.",
    ]
    if recorded_as_step(problem):
        words.append(
            f"**y0**: the model is its training step, so its input is the batch: {_batch_gradient(ran)}, and the "
            f"solution is that of the step's {_record(problem)}."
            + _routed_sentence(problem, sorted(set(ran["library"])))
        )
    if ran["library"].map(lambda name: formatting.library_member(name, "native_solver")).any():
        words.append(
            "**native**: this package's mixed-precision solver, `roundoff_analyzer.solvers.odeint`, a drop-in for "
            "torchdiffeq's fixed-grid `odeint`: it evaluates each step in the low dtype but updates the state and "
            "sums the gradients in float32"
            + (
                " (`native-low` returns the stored low-precision states as the trajectory)."
                if ran["library"].map(lambda name: formatting.library_member(name, "returns_low_trajectory")).any()
                else "."
            )
        )
    for scaling in ran["scaling"].unique():  # in the order the table lists them
        glossary = formatting.scaling_glossary(scaling)
        if glossary:
            words.append(f"**{scaling}**: {glossary}")
    if ran["mode"].str.startswith("autocast").any():
        words.append(
            "**autocast**: the model runs under `torch.autocast`, which computes matrix products in the low dtype "
            "and keeps the weights in float32."
        )
    t0, t1 = formatting.span(results)
    words.append(
        "**adjoint**: the gradient of the loss with respect to the state at one time step, which the backward pass "
        f"carries from t = {t1} back to t = {t0}; it is where low precision overflows or underflows first."
    )
    if "disc_sol_rel_err" in ran and ran["disc_sol_rel_err"].notna().any():
        words.append(
            "**discretisation error**: how far the float64 solution on the sweep's time grid is from a fine "
            "reference: the error of the method and its n_timesteps. Where the roundoff exceeds it, more steps no "
            "longer make the result more accurate in that dtype."
        )
    if "grad_noise_rel" in ran and ran["grad_noise_rel"].notna().any():
        words.append(
            "**gradient noise**: how much the float64 parameter gradient changes from one batch of data to another; "
            "training already lives with it, so a roundoff well under it does not change what training does."
        )
    return words


def _batch_gradient(ran: pd.DataFrame) -> str:
    """What the gradient w.r.t. y0 is for a step: measured on the batch in folders swept before the step was handed
    its batch as training hands it (ProblemCopies.differentiates_batch), not measured since."""
    if ran["grad_y0_rel_err"].notna().any():
        return "the gradient w.r.t. y0 is the gradient with respect to the batch's floating-point tensors"
    return (
        "the gradient w.r.t. y0 is not measured (its columns are empty), since a training step does not "
        "differentiate its batch and the step is handed the batch as training hands it, no tensor requiring grad "
        "(a batch that does changes what some code computes: torchcde's `cdeint` warns that its adjoint leaves "
        "the path's coefficients without a gradient)"
    )


def _record(problem: dict | None) -> str:
    """Which of the step's solves the solution is, as the manifest records it (a folder from before: the first)."""
    problem = problem or {}
    index, named = problem.get("solve_of_record", 0), problem.get("solve_of_record_named", False)
    return record_words(problem.get("n_solves", 1), index, named)


def _routed_sentence(problem: dict | None, libraries: list[str]) -> str:
    """Where the step's solves came from, where its modules called torchdiffeq themselves, and what answered an
    `odeint_adjoint` call in each library's rows."""
    routed = [RoutedSolves(**record) for record in (problem or {}).get("routed") or []]
    if not routed:
        return ""
    n_solves = (problem or {}).get("n_solves", 1)
    handed = n_solves - sum(r.solves for r in routed)
    rest = f"; {handed} through the `odeint` handed to the step" if handed > 0 else ""
    adjoint = ""
    if any(r.function == "odeint_adjoint" for r in routed):
        forms = {name: formatting.library_member(name, "adjoint_form") for name in libraries}
        by_form = [f"by {form} in the {name} rows" for name, form in forms.items() if form is not None]
        itself = [name for name, form in forms.items() if form is None]
        said = by_form + ([f"by the row's library itself in the {', '.join(itself)} rows"] if itself else [])
        adjoint = f" (an `odeint_adjoint` call {'; '.join(said)})"
    return (
        f" Of its {n_solves} solve{'s' if n_solves > 1 else ''} per step, {routed_words(routed)}{rest}; its modules' "
        f"calls of torchdiffeq were answered by each row's library{adjoint}."
    )
