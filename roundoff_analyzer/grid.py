"""The sweep grid: which configurations to run, in which order, and which are skipped and why."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .dtypes import DTYPES

CONFIG_COLUMNS = ("model", "library", "method", "n_timesteps", "dtype", "scaling", "mode", "arithmetic", "rounding")
# What results written before the arithmetic axis existed ran with.
AXIS_DEFAULTS = {"arithmetic": "hardware", "rounding": "nearest"}

# SPEC section 4, after seed 000: bfloat16 runs without scaling only; float16 runs with
# torchdiffeq x {none, grad} and native x {none, grad, dynamic}. 7 per (n_timesteps, method).
SEED000_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("torchdiffeq", "float16", "none"),
    ("torchdiffeq", "float16", "grad"),
    ("torchdiffeq", "bfloat16", "none"),
    ("native", "float16", "none"),
    ("native", "float16", "grad"),
    ("native", "float16", "dynamic"),
    ("native", "bfloat16", "none"),
)


def file_safe(name: str) -> str:
    """`name` with every run of characters other than letters, digits, `_` and `.` made one `_`."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name)


@dataclass(frozen=True)
class Configuration:
    model: str
    library: str
    method: str
    n_timesteps: int
    dtype: str
    scaling: str
    mode: str
    arithmetic: str = "hardware"
    rounding: str = "nearest"

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in CONFIG_COLUMNS)

    @property
    def id(self) -> str:
        """A file-name-safe identity, stable across runs."""
        return f"{file_safe(self.model)}-{file_safe(self.library)}-{self.method}-n{self.n_timesteps:06d}-{self.dtype}-{self.scaling}-{self.mode}{self._precision('-')}"

    def _precision(self, sep: str) -> str:
        # Hardware arithmetic with nearest rounding adds nothing, so ids and labels from before the axis stay the same.
        parts = [self.arithmetic] if self.arithmetic != "hardware" else []
        parts += [self.rounding] if self.rounding != "nearest" else []
        return "".join(sep + p for p in parts)

    def as_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        return f"{self.library} {self.method} n={self.n_timesteps} {self.dtype} {self.scaling} {self.mode}{self._precision(' ')}"


@dataclass(frozen=True)
class Grid:
    timesteps: tuple[int, ...]
    methods: tuple[str, ...]
    modes: tuple[str, ...]
    # (library, dtype, scaling) triples: the SPEC's pairs, or the full product of the asked axes.
    triples: tuple[tuple[str, str, str], ...]
    # None: each dtype's default arithmetic (emulated for stochastic rounding); else the product.
    arithmetics: tuple[str, ...] | None = None
    roundings: tuple[str, ...] = ("nearest",)

    @classmethod
    def build(cls, timesteps, methods, modes, libraries=None, dtypes=None, scalings=None, arithmetics=None, roundings=None) -> "Grid":
        if libraries is None and dtypes is None and scalings is None:
            triples = SEED000_PAIRS
        else:
            triples = tuple(
                (library, dtype, scaling)
                for library in libraries or ("torchdiffeq", "native")
                for dtype in dtypes or ("float16", "bfloat16")
                for scaling in scalings or ("none", "grad", "dynamic")
            )
        return cls(
            tuple(timesteps), tuple(methods), tuple(modes), triples,
            tuple(arithmetics) if arithmetics else None, tuple(roundings) if roundings else ("nearest",),
        )  # fmt: skip

    def precisions(self, dtype: str) -> list[tuple[str, str]]:
        """(arithmetic, rounding) pairs for one dtype."""
        return [
            (arithmetic, rounding)
            for rounding in self.roundings
            for arithmetic in self.arithmetics or ("emulated" if rounding != "nearest" else DTYPES.get(dtype).default_arithmetic,)
        ]

    @property
    def default_precision(self) -> bool:
        """Every configuration is hardware arithmetic rounding to nearest, as before the arithmetic axis."""
        return self.roundings == ("nearest",) and all(
            arithmetic == "hardware" for _, dtype, _ in self.triples for arithmetic, _ in self.precisions(dtype)
        )

    def configurations(self, model: str) -> list[Configuration]:
        # Grouped by (method, n_timesteps) so one reference per library serves consecutive runs.
        return [
            Configuration(model, library, method, n, dtype, scaling, mode, arithmetic, rounding)
            for method in self.methods
            for n in self.timesteps
            for mode in self.modes
            for library, dtype, scaling in self.triples
            for arithmetic, rounding in self.precisions(dtype)
        ]

    def describe(self) -> str:
        per_cell = sum(len(self.precisions(dtype)) for _, dtype, _ in self.triples)
        triples = f"{len(self.triples)} (library, dtype, scaling)"
        if per_cell != len(self.triples):
            triples = f"{per_cell} (library, dtype, scaling, arithmetic, rounding)"
        return (
            f"{len(self.timesteps)} n_timesteps x {len(self.methods)} methods x {len(self.modes)} modes "
            f"x {triples} = {len(self.timesteps) * len(self.methods) * len(self.modes) * per_cell} configurations"
        )
