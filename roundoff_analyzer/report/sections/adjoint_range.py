"""The range-of-the-adjoint section: the adjoint's largest magnitude per backward step against the dtype's range, drawn
at the largest n_timesteps and wherever a run failed."""

from __future__ import annotations

from .. import formatting
from ..figure_data import ADJOINT_FIGURE
from ..section_inputs import SectionInputs


def section(inputs: SectionInputs) -> list[str]:
    return adjoint_range(inputs.figures)


def adjoint_range(figures: dict[str, tuple[str, str]]) -> list[str]:
    drawn = sorted(
        (int(name.rsplit("_n", 1)[1]), paths) for name, paths in figures.items() if name.startswith(ADJOINT_FIGURE)
    )
    if not drawn:
        return []
    lines = [
        "## Range of the adjoint",
        "",
        "The largest magnitude of the adjoint of the state as the low dtype holds it at each backward step "
        "(multiplied by the loss or adjoint scale in effect, then rounded to the low dtype), against the dtype's "
        "largest finite number and its smallest normal number (where they lie near the data); the grey lines are "
        "each library's float64 reference (unscaled). A × marks a step with a non-finite value in a run that "
        "failed, a ○ one in a run that still ended ok (its backward used a wider adjoint, or its scaler redid the "
        "step; the key findings list them), each in the grey band at the top when the value itself is not finite. "
        "Drawn at the largest n_timesteps and at every n_timesteps where a run failed: n = "
        f"{formatting.listing(n for n, _ in drawn)}.",
    ]
    for n, (png, svg) in drawn:
        lines += ["", f"![largest adjoint magnitude per backward step, n_timesteps = {n}]({png}) ([SVG]({svg}))"]
    return lines
