from .base import ROUNDINGS, Rounding


class Stochastic(Rounding):
    name = "stochastic"
    description = (
        "emulated only: round up with probability equal to the distance from the value below; with --repeats K, "
        "the spread of the K runs gives sig_digits_* without a reference"
    )
    random = True


ROUNDINGS.register(Stochastic())
