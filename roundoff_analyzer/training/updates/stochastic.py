from ...emulation.rounding import round_stochastic
from .base import UPDATES, UpdateRule


class Stochastic(UpdateRule):
    name = "stochastic"
    description = (
        "w + delta rounded stochastically (exactly, up with probability its distance from the value below): unbiased"
    )
    compensated, stochastic = False, True

    def apply(self, w, delta, compensation, fmt, generator):
        return round_stochastic(w + delta, fmt, generator)


UPDATES.register(Stochastic())
