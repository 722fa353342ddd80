from ...emulation.rounding import round_nearest
from .base import UPDATES, UpdateRule
from .compensated import compensated_sum


class Kahan(UpdateRule):
    name = "kahan"
    description = (
        "round to nearest, with a compensation buffer in the weights' format carrying what rounding dropped into the "
        "next step"
    )
    compensated, stochastic = True, False

    def apply(self, w, delta, compensation, fmt, generator):
        return compensated_sum(w, delta, compensation, fmt, lambda x: round_nearest(x, fmt))


UPDATES.register(Kahan())
