from .base import ARITHMETICS, Arithmetic, ArithmeticRequest, tensor_scaling
from . import emulated, hardware  # noqa: F401  (registrations)

__all__ = ["ARITHMETICS", "Arithmetic", "ArithmeticRequest", "tensor_scaling"]
