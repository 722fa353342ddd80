from .base import METHODS, ExplicitRK

METHODS.register(
    ExplicitRK("midpoint", a=((), (0.5,)), b=(0.0, 1.0), c=(0.0, 0.5), description="explicit midpoint, order 2")
)
