"""The answer's code for a model whose own modules call torchdiffeq (the sweep routed those calls,
measuring/torchdiffeq_routing.py): the import line to change in each such module, and the arguments its calls then
pass to solve as the chosen runs did."""

from __future__ import annotations

from ...judging import answer
from ...measuring.torchdiffeq_routing import RoutedSolves, user_import
from .. import formatting


def routed_lines(a: answer.Answer, problem: dict, solver_options: list[str]) -> list[str]:
    """A comment line per name the step's solves were routed through (the manifest's `problem.routed`): what to import
    there in place of torchdiffeq's function to solve as answer `a`'s runs did, and the arguments its calls pass."""
    lines = []
    calls = f"its calls with {', '.join(solver_options)}, as measured"
    for record in problem.get("routed") or []:
        routed = RoutedSolves(**record)
        original, replacement = user_import(routed), _replacement(a.library, routed)
        if original is None:  # calls written torchdiffeq.odeint(...)
            instead = f"call {replacement} in its place, " if replacement else ""
            lines.append(f"# where your code calls torchdiffeq.{routed.function}: {instead}{calls}")
        elif replacement is None:
            lines.append(f"# {_file(routed)}: its `{original}` stands; {calls}")
        else:
            lines.append(f"# {_file(routed)}: {replacement}  # in place of `{original}`; {calls}")
    return lines


def _replacement(library: str, routed: RoutedSolves) -> str | None:
    """The import line (for calls through torchdiffeq's namespace, the function) that solves as `library` did; None
    where the user's own already does."""
    namespace = user_import(routed) is None
    if formatting.library_member(library, "native_solver"):
        if namespace:
            return f"roundoff_analyzer.solvers.{routed.function}"
        alias = "" if routed.name == routed.function else f" as {routed.name}"
        return f"from roundoff_analyzer.solvers import equal_steps, {routed.function}{alias}"
    wanted = formatting.library_member(library, "routed_function")
    if wanted is None:
        return f"solve with {library}, as this sweep did,"
    if wanted == routed.function:
        return None
    return f"torchdiffeq.{wanted}" if namespace else f"from torchdiffeq import {wanted} as {routed.name}"


def _file(routed: RoutedSolves) -> str:
    return routed.module.replace(".", "/") + ".py"
