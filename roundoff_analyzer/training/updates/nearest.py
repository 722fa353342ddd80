from ...emulation.rounding import round_nearest
from .base import UPDATES, UpdateRule


class Nearest(UpdateRule):
    name = "nearest"
    description = "w + delta rounded to nearest (even): what a plain optimizer step on low-precision weights does"
    compensated = stochastic = False

    def apply(self, w, delta, compensation, fmt, generator):
        return round_nearest(w + delta, fmt)


UPDATES.register(Nearest())
