from .base import ROUNDINGS, Rounding


class Nearest(Rounding):
    name = "nearest"
    description = "round to nearest, ties to even (what hardware does)"
    random = False


ROUNDINGS.register(Nearest())
