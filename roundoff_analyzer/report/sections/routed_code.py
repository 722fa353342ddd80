"""The answer's code for a model whose own modules (or a package it calls, torchcde's `cdeint`) call torchdiffeq: the
sweep routed those calls (measuring/torchdiffeq_routing.py), and the code runs the step inside `answered_by`
(roundoff_analyzer.solvers), under which they solve as the chosen runs did, with nothing of the user's edited. An
`odeint_adjoint` call is answered by the library's adjoint form where it has one, as the sweep answered it."""

from __future__ import annotations

from dataclasses import dataclass

from ...judging import answer
from ...measuring.torchdiffeq_routing import RoutedSolves, user_import
from .. import formatting

ADJOINT_SOLVE = "solve_adjoint"


@dataclass(frozen=True)
class RoutedCode:
    """What the answer's code adds for routed calls: its imports (besides `answered_by`), the comment lines saying
    where the calls are, the function answering `odeint_adjoint` calls (None: `solve` answers them too) and the
    context the step runs in."""

    imports: tuple[str, ...] = ()
    comments: tuple[str, ...] = ()
    adjoint_function: str | None = None
    context: str | None = None


def routed_code(a: answer.Answer, problem: dict) -> RoutedCode:
    """The routed calls' part of answer `a`'s code; nothing where the step's solves all came through its argument, or
    where `a`'s library has no `odeint` to write (the code is then one line saying why)."""
    routed = [RoutedSolves(**record) for record in problem.get("routed") or []]
    if not routed or formatting.writes_no_code(formatting.library_import_line(a.library)):
        return RoutedCode()
    form = formatting.library_member(a.library, "adjoint_form")
    adjoint = form is not None and any(r.function == "odeint_adjoint" for r in routed)
    function = formatting.library_member(form, "routed_function") if adjoint else None
    imports = [f"from torchdiffeq import {function}"] if function is not None else []
    answering = f"solve, adjoint={ADJOINT_SOLVE}" if function is not None else "solve"
    comments = tuple(_comment(r, function is not None and r.function == "odeint_adjoint", form) for r in routed)
    return RoutedCode(tuple(imports), comments, function, f"answered_by({answering})")


def _comment(routed: RoutedSolves, by_adjoint: bool, form: str | None) -> str:
    """Where one routed name's calls are and what answers them."""
    line = user_import(routed)
    if line is not None:
        where = f"{routed.module.replace('.', '/')}.py: its `{line}` stands"
    else:
        where = f"{routed.caller or 'your code'}: its call of torchdiffeq.{routed.function} stands"
    answered = f"{ADJOINT_SOLVE} ({form})" if by_adjoint else "solve"
    return f"# {where}; answered_by answers it with {answered}"
