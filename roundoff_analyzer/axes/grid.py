"""The sweep grid: which configurations to run, in which order, and which are skipped and why."""

from __future__ import annotations

import hashlib
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from .dtypes import DTYPES

# The default grid's (library, dtype, scaling) triples: bfloat16 (float32's range) runs without scaling only;
# float16 runs with torchdiffeq x {none, grad} and native x {none, grad, dynamic} (torchdiffeq has no adjoint of its
# own to scale). 7 per (n_timesteps, method).
DEFAULT_TRIPLES: tuple[tuple[str, str, str], ...] = (
    ("torchdiffeq", "float16", "none"),
    ("torchdiffeq", "float16", "grad"),
    ("torchdiffeq", "bfloat16", "none"),
    ("native", "float16", "none"),
    ("native", "float16", "grad"),
    ("native", "float16", "dynamic"),
    ("native", "bfloat16", "none"),
)
# Where some of library, dtype and scaling are asked for, the others take every value the default triples have.
DEFAULT_LIBRARIES, DEFAULT_DTYPES, DEFAULT_SCALINGS = (tuple(dict.fromkeys(axis)) for axis in zip(*DEFAULT_TRIPLES))


def file_safe(name: str) -> str:
    """`name` with every run of characters other than letters, digits, `_` and `.` made one `_`."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name)


@dataclass(frozen=True)
class Configuration:
    """One run of the grid, a value on every axis. Its fields are the axes, in the order of the tables' columns; a
    field's default is what results written before its axis existed ran with (before the arithmetic axis, hardware
    arithmetic; before the checkpoint axis, a sweep's single set of weights; before loss_in, the loss formed outside
    autocast, in float32; before keep_float32, no module kept out of autocast; before the seed axis, the sweep's single
    seed, which its manifest records: `storage/older_tables.py` fills that one from there)."""

    model: str
    library: str
    method: str
    n_timesteps: int
    dtype: str
    scaling: str
    mode: str
    arithmetic: str = "hardware"
    rounding: str = "nearest"
    checkpoint: str = ""  # the checkpoint's name when a sweep has several; "" for its single set of weights
    loss_in: str = "float32"  # where the loss is formed: outside autocast in float32, or inside autocast
    keep_float32: str = "none"  # modules run in float32 out of autocast: names or glob patterns joined with "+"
    seed: int = 0  # the seed the factory drew the weights (and batch) with

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in CONFIG_COLUMNS)

    @property
    def problem_key(self) -> tuple[str, int]:
        """Which problem it runs on: its checkpoint's weights and its seed's (each has its own references and
        yardsticks)."""
        return (self.checkpoint, self.seed)

    @property
    def id(self) -> str:
        """A file-name-safe identity, stable across runs."""
        checkpoint = "-ckpt-" + file_safe(self.checkpoint) if self.checkpoint else ""
        return (
            f"{file_safe(self.model)}-{file_safe(self.library)}-{self.method}-n{self.n_timesteps:06d}-{self.dtype}-"
            f"{self.scaling}-{self.mode}{self._precision('-')}{checkpoint}{self._loss('-loss-')}"
            f"{self._kept('-keep-', for_id=True)}{self._seed('-seed')}"
        )

    def _seed(self, prefix: str) -> str:
        # Seed 0 adds nothing, so that ids and labels from before the axis stay the same (a shard written before it
        # reads back without the column: None).
        return f"{prefix}{self.seed}" if self.seed not in (None, AXIS_DEFAULTS["seed"]) else ""

    def _kept(self, prefix: str, for_id: bool = False) -> str:
        # Nothing kept adds nothing, so that ids and labels from before the axis stay the same. Patterns that differ
        # only in characters a file name cannot hold (`*`, `?`) get ids of their own from a short hash.
        if self.keep_float32 in (None, "none"):  # None: a shard written before the axis reads back without the column
            return ""
        if for_id:
            safe = file_safe(self.keep_float32)
            digest = hashlib.sha256(self.keep_float32.encode()).hexdigest()[:8]
            return f"{prefix}{safe}" if safe == self.keep_float32 else f"{prefix}{safe}-{digest}"
        return f"{prefix}{self.keep_float32}"

    def _precision(self, sep: str) -> str:
        # Hardware arithmetic with nearest rounding adds nothing, so ids and labels from before the axis stay the same.
        parts = [self.arithmetic] if self.arithmetic != "hardware" else []
        parts += [self.rounding] if self.rounding != "nearest" else []
        return "".join(sep + p for p in parts)

    def _loss(self, prefix: str) -> str:
        # The default placement adds nothing, so that ids and labels from before the axis stay the same (a shard
        # written before it reads back without the column: None).
        return f"{prefix}{self.loss_in}" if self.loss_in not in (None, AXIS_DEFAULTS["loss_in"]) else ""

    def as_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        return (
            f"{self.library} {self.method} n={self.n_timesteps} {self.dtype} {self.scaling} "
            f"{self.mode}{self._precision(' ')}{self._loss(' loss in ')}"
            f"{' @ ' + self.checkpoint if self.checkpoint else ''}{self._kept(' keep_float32=')}{self._seed(' seed ')}"
        )


# The axes as the tables' columns, and what a table from before an axis existed ran with: read off Configuration.
CONFIG_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Configuration))
AXIS_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Configuration) if f.default is not MISSING}


@dataclass(frozen=True)
class Grid:
    timesteps: tuple[int, ...]
    methods: tuple[str, ...]
    modes: tuple[str, ...]
    # (library, dtype, scaling) triples: the default grid's, or the full product of the asked axes.
    triples: tuple[tuple[str, str, str], ...]
    # None: each dtype's default arithmetic (emulated for stochastic rounding); else the product.
    arithmetics: tuple[str, ...] | None = None
    roundings: tuple[str, ...] = (AXIS_DEFAULTS["rounding"],)
    # Values given more than once, as "axis value" (each runs once); said in the description, not part of the sweep's
    # identity.
    repeated: tuple[str, ...] = field(default=(), compare=False)
    # Checkpoint names, the grid run once per name; ("",): the sweep's single set of weights.
    checkpoints: tuple[str, ...] = ("",)
    # Where the loss is formed (the loss_in axis), each placement over the whole grid.
    loss_ins: tuple[str, ...] = (AXIS_DEFAULTS["loss_in"],)
    # keep_float32 values, each a run of the grid's configurations; by default none: every module in the low dtype.
    kept: tuple[str, ...] = (AXIS_DEFAULTS["keep_float32"],)
    # The seeds the factory builds the model with, each a run of the grid; one by default, the model options' seed.
    seeds: tuple[int, ...] = (AXIS_DEFAULTS["seed"],)

    @classmethod
    def build(
        cls,
        timesteps,
        methods,
        modes,
        libraries=None,
        dtypes=None,
        scalings=None,
        arithmetics=None,
        roundings=None,
        loss_ins=None,
        keep_float32=None,
        seeds=None,
    ) -> Grid:
        axes = {
            "n_timesteps": timesteps,
            "method": methods,
            "mode": modes,
            "library": libraries,
            "dtype": dtypes,
            "scaling": scalings,
            "arithmetic": arithmetics,
            "rounding": roundings,
            "loss_in": loss_ins,
        }
        repeated = tuple(f"{axis} {value}" for axis, values in axes.items() for value in _repeated(values or ()))
        repeated += tuple(f"keep_float32 {value}" for value in _repeated(keep_float32 or ()))
        repeated += tuple(f"seed {value}" for value in _repeated(seeds or ()))
        timesteps, methods, modes, libraries, dtypes, scalings, arithmetics, roundings, loss_ins = (
            _unique(values) for values in axes.values()
        )
        if libraries is None and dtypes is None and scalings is None:
            triples = DEFAULT_TRIPLES
        else:
            triples = tuple(
                (library, dtype, scaling)
                for library in libraries or DEFAULT_LIBRARIES
                for dtype in dtypes or DEFAULT_DTYPES
                for scaling in scalings or DEFAULT_SCALINGS
            )
        return cls(
            tuple(timesteps),
            tuple(methods),
            tuple(modes),
            triples,
            tuple(arithmetics) if arithmetics else None,
            tuple(roundings) if roundings else (AXIS_DEFAULTS["rounding"],),
            repeated,
            loss_ins=tuple(loss_ins) if loss_ins else (AXIS_DEFAULTS["loss_in"],),
            kept=tuple(_unique(keep_float32)) if keep_float32 else (AXIS_DEFAULTS["keep_float32"],),
            seeds=tuple(_unique(seeds)) if seeds else (AXIS_DEFAULTS["seed"],),
        )

    def precisions(self, dtype: str) -> list[tuple[str, str]]:
        """(arithmetic, rounding) pairs for one dtype."""
        return [
            (arithmetic, rounding)
            for rounding in self.roundings
            for arithmetic in self.arithmetics
            or ("emulated" if rounding != "nearest" else DTYPES.get(dtype).default_arithmetic,)
        ]

    @property
    def default_precision(self) -> bool:
        """Every configuration is hardware arithmetic rounding to nearest, as before the arithmetic axis."""
        return self.roundings == ("nearest",) and all(
            arithmetic == "hardware" for _, dtype, _ in self.triples for arithmetic, _ in self.precisions(dtype)
        )

    def configurations(self, model: str) -> list[Configuration]:
        # One checkpoint's (or seed's) grid after the other; inside, grouped by (method, n_timesteps) so one
        # reference per library serves consecutive runs.
        return [
            Configuration(
                model, library, method, n, dtype, scaling, mode, arithmetic, rounding, checkpoint, loss_in, kept, seed
            )
            for checkpoint in self.checkpoints
            for seed in self.seeds
            for method in self.methods
            for n in self.timesteps
            for mode in self.modes
            for library, dtype, scaling in self.triples
            for arithmetic, rounding in self.precisions(dtype)
            for loss_in in self.loss_ins
            for kept in self.kept
        ]

    @property
    def default_loss_in(self) -> bool:
        """Every configuration forms its loss as every run did before the loss_in axis."""
        return self.loss_ins == (AXIS_DEFAULTS["loss_in"],)

    def describe(self, repeats: bool = True) -> str:
        """How the grid multiplies out; with `repeats`, also which values were given twice and run once."""
        per_cell = sum(len(self.precisions(dtype)) for _, dtype, _ in self.triples)
        triples = f"{len(self.triples)} (library, dtype, scaling)"
        if per_cell != len(self.triples):
            triples = f"{per_cell} (library, dtype, scaling, arithmetic, rounding)"
        per_checkpoint = (
            len(self.timesteps) * len(self.methods) * len(self.modes) * per_cell * len(self.loss_ins) * len(self.kept)
        )
        # The default placement and keeping nothing in float32 say nothing: a version-1 fingerprint holds this text
        # (without the repeats), and planning/fingerprint.py compares a folder of that version by it.
        placements = (
            "" if self.default_loss_in else f" x {len(self.loss_ins)} loss placements ({', '.join(self.loss_ins)})"
        )
        kept = f" x {len(self.kept)} keep_float32" if self.kept != ("none",) else ""
        described = (
            f"{len(self.timesteps)} n_timesteps x {len(self.methods)} methods x {len(self.modes)} modes x "
            f"{triples}{placements}{kept} = {per_checkpoint} configurations"
        )
        axes = ((self.checkpoints, "checkpoints"), (self.seeds, "seeds"))
        several = [f"{len(values)} {name}" for values, name in axes]
        if len(self.checkpoints) > 1 or len(self.seeds) > 1:
            in_all = per_checkpoint * len(self.checkpoints) * len(self.seeds)
            described += f", x {' x '.join(n for n in several if not n.startswith('1 '))} = {in_all} in all"
        if repeats and self.repeated:
            described += f" (given more than once, run once: {', '.join(self.repeated)})"
        return described


def _unique(values):
    """The values in the order given, each once (None stays None: the axis was not named)."""
    return None if values is None else tuple(dict.fromkeys(values))


def _repeated(values) -> list:
    seen, repeated = set(), []
    for value in values:
        if value in seen and value not in repeated:
            repeated.append(value)
        seen.add(value)
    return repeated
