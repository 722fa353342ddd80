"""The sweep grid: which configurations to run, in which order, and which are skipped and why."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

CONFIG_COLUMNS = ("model", "library", "method", "n_timesteps", "dtype", "scaling", "mode")

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

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in CONFIG_COLUMNS)

    @property
    def id(self) -> str:
        """A file-name-safe identity, stable across runs."""
        return f"{file_safe(self.model)}-{file_safe(self.library)}-{self.method}-n{self.n_timesteps:06d}-{self.dtype}-{self.scaling}-{self.mode}"

    def as_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        return f"{self.library} {self.method} n={self.n_timesteps} {self.dtype} {self.scaling} {self.mode}"


@dataclass(frozen=True)
class Grid:
    timesteps: tuple[int, ...]
    methods: tuple[str, ...]
    modes: tuple[str, ...]
    # (library, dtype, scaling) triples: the SPEC's pairs, or the full product of the asked axes.
    triples: tuple[tuple[str, str, str], ...]

    @classmethod
    def build(cls, timesteps, methods, modes, libraries=None, dtypes=None, scalings=None) -> "Grid":
        if libraries is None and dtypes is None and scalings is None:
            triples = SEED000_PAIRS
        else:
            triples = tuple(
                (library, dtype, scaling)
                for library in libraries or ("torchdiffeq", "native")
                for dtype in dtypes or ("float16", "bfloat16")
                for scaling in scalings or ("none", "grad", "dynamic")
            )
        return cls(tuple(timesteps), tuple(methods), tuple(modes), triples)

    def configurations(self, model: str) -> list[Configuration]:
        # Grouped by (method, n_timesteps) so one reference per library serves consecutive runs.
        return [
            Configuration(model, library, method, n, dtype, scaling, mode)
            for method in self.methods
            for n in self.timesteps
            for mode in self.modes
            for library, dtype, scaling in self.triples
        ]

    def describe(self) -> str:
        return (
            f"{len(self.timesteps)} n_timesteps x {len(self.methods)} methods x {len(self.modes)} modes "
            f"x {len(self.triples)} (library, dtype, scaling) = "
            f"{len(self.timesteps) * len(self.methods) * len(self.modes) * len(self.triples)} configurations"
        )
