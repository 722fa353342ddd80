from .base import DTYPES, FLOAT64, DtypeSpec
from . import bfloat16, float16, float32  # noqa: F401  (registrations)

__all__ = ["DTYPES", "FLOAT64", "DtypeSpec"]
