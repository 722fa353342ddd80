"""How many changes a setup asks of the user's code: among setups safe for training the one with the fewest goes first
(docs/verdict.md, "The answer"). Pure functions of a setup's judgement.

The changes, most weighty first: modules kept in float32 (how many), loss scaling, a library other than the user's
own, a float32 part (the loss formed in float32). The user's own library is the one a model's own torchdiffeq calls
are (a library that declares the `routed_function` it stands for: torchdiffeq is what users run); one that replaces
those calls (the native solver) or any other library is another, and asks the user to switch.
"""

from __future__ import annotations

from ..axes.libraries.base import library_member
from ..axes.scalings import scales
from .verdict import SetupJudgement

FLOAT32_LOSS = "float32"  # the loss_in value that forms the loss in float32, outside autocast


def users_own(library: str) -> bool:
    """Whether `library` is what a user's own code calls: the library a model's torchdiffeq calls are."""
    return library_member(library, "routed_function") is not None


def changes(j: SetupJudgement, kept: str | None = None) -> tuple[int, bool, bool, bool]:
    """The changes `j` asks for, comparable (fewer first): modules kept in float32 (`kept`: the keep_float32 value,
    names joined with "+"; None or "none": nothing kept), scaling, another library, the loss formed in float32."""
    held = 0 if kept in (None, "none") else len(kept.split("+"))
    return held, scales(j.scaling), not users_own(j.library), j.loss_in == FLOAT32_LOSS
