from ...emulation.rounding import round_stochastic
from .base import UPDATES, UpdateRule
from .compensated import compensated_sum


class StochasticKahan(UpdateRule):
    name = "stochastic-kahan"
    description = (
        "stochastic rounding of the compensated sum, the compensation buffer (weights' format) carrying what it dropped"
    )
    compensated = stochastic = True

    def apply(self, w, delta, compensation, fmt, generator):
        return compensated_sum(w, delta, compensation, fmt, lambda x: round_stochastic(x, fmt, generator))


UPDATES.register(StochasticKahan())
