from .base import ROUNDINGS


class Nearest:
    name = "nearest"
    description = "round to nearest, ties to even (what hardware does)"
    random = False


ROUNDINGS.register(Nearest())
