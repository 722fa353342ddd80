# ruff: noqa: I001  (the imports register values; their order is the order the values are listed and swept)
from .base import DATA_SOURCES, Batch, DataOptions, DataSource
from .request import DataRequest, parse_data

# Registrations, in the order `roundoff list` shows them.
from . import synthetic, two_spirals, eight_gaussians, bsds300  # noqa: F401, I001

__all__ = ["DATA_SOURCES", "Batch", "DataOptions", "DataRequest", "DataSource", "parse_data"]
