from .base import METHODS, ExplicitRK

METHODS.register(ExplicitRK("euler", a=((),), b=(1.0,), c=(0.0,), description="explicit Euler, order 1"))
