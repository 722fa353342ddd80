# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import ARITHMETICS, Arithmetic, ArithmeticRequest, tensor_scaling
from . import emulated, hardware  # noqa: F401  (registrations)

__all__ = ["ARITHMETICS", "Arithmetic", "ArithmeticRequest", "tensor_scaling"]
