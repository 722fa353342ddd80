# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import DTYPES, FLOAT64, DtypeSpec
from . import bfloat16, custom, float16, float32, float8_e4m3, float8_e5m2  # noqa: F401  (registrations)

__all__ = ["DTYPES", "FLOAT64", "DtypeSpec"]
