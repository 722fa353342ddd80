"""What a sweep is asked to do, validated: from a TOML file, the command line, or both (the command line wins)."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin, overload

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from ..axes.names import axis_names
from ..axes.scaler_settings import ScalerSettings
from ..core.errors import InputError
from ..core.registry import Registry
from ..core.text import shortened
from ..core.validation import bool_given_for_number, location, phrase

# Sized for a 2-core CPU: the bare `roundoff sweep --model otflow` finishes in well under 3 minutes.
DEFAULT_TIMESTEPS = (8, 32, 128)
DEFAULT_METHODS = ("euler", "rk4")
# n_timesteps is stored as a 64-bit integer; whether a value fits in memory is decided per configuration (an `oom` row).
MAX_TIMESTEPS = 2**63 - 1
# Below a millisecond the timer cannot be honoured and no configuration can finish.
MIN_TIMEOUT_S = 1e-3


# Gradient-noise batches of a sweep, unless asked otherwise.
DEFAULT_NOISE_BATCHES = 16

# Each sweep axis given by name; axis_registry gives the registry its names must come from.
# A config schema: SweepConfig, or another such as training's.
ConfigT = TypeVar("ConfigT", bound=BaseModel)

# The axes whose values a registry names: each axis's package under roundoff_analyzer.axes and its registry there.
_AXIS_REGISTRIES = {
    "method": ("methods", "METHODS"),
    "library": ("libraries", "LIBRARIES"),
    "dtype": ("dtypes", "DTYPES"),
    "scaling": ("scalings", "SCALINGS"),
    "mode": ("modes", "MODES"),
    "arithmetic": ("arithmetics", "ARITHMETICS"),
    "rounding": ("roundings", "ROUNDINGS"),
    "loss_in": ("loss_placements", "LOSS_PLACEMENTS"),
}
AXES = tuple(_AXIS_REGISTRIES)


def list_valued_keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys of a config whose value may be a list: from Python a single value counts as a list of one. Read off
    the fields' annotations, so that a list-valued key added to the config is one without another list to extend."""

    def takes_list(annotation: Any) -> bool:
        return get_origin(annotation) is list or any(takes_list(arg) for arg in get_args(annotation))

    return tuple(name for name, info in model.model_fields.items() if takes_list(info.annotation))


def axis_registry(axis: str) -> Registry[Any]:
    """The registry of `axis`, imported when a value is checked: the registries import torch, and the schema (whose
    defaults `roundoff sweep --help` shows) does not need them."""
    package, name = _AXIS_REGISTRIES[axis]
    return getattr(importlib.import_module(f"..axes.{package}", __package__), name)


def names_in(registry: Registry, values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    if not values:
        raise ValueError(f"needs at least one {registry.axis}; allowed: {', '.join(registry.allowed())}")
    unknown = [v for v in values if v not in registry]
    if unknown:
        raise ValueError(
            f"unknown {registry.axis} {', '.join(repr(shortened(v)) for v in unknown)}; allowed: "
            f"{', '.join(registry.allowed())}"
        )
    return values


# Slurm's time limits: the forms sbatch --time takes, as --help, the error and the guide name them, or none.
SLURM_TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_SLURM_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE")
# sbatch options that the executor sets itself or that have a key of their own.
_SBATCH_TAKEN = {
    "array": "is set by the executor (one task per reference group)",
    "output": "is set by the executor (logs in <out>/slurm)",
    "error": "is set by the executor (logs in <out>/slurm)",
    "open-mode": "is set by the executor",
    "wrap": "is set by the executor",
    "partition": "has its own key: 'partition' (--slurm-partition)",
    "time": "has its own key: 'time' (--slurm-time)",
    "gpus-per-task": "has its own key: 'gpus_per_task' (--slurm-gpus-per-task)",
}


class SlurmSettings(BaseModel):
    """`[slurm]` in a config file, `--slurm-*` on the command line: what each array task asks the cluster for."""

    model_config = ConfigDict(extra="forbid")
    partition: str | None = Field(None, description="sbatch --partition (default: the cluster's default partition)")
    time: str | None = Field(
        None, description=f"time limit of each task: {SLURM_TIME_FORMS} (default: the partition's)"
    )
    gpus_per_task: PositiveInt | None = Field(None, description="sbatch --gpus-per-task")
    options: dict[str, bool | int | str] = Field(
        default_factory=dict,
        description='more sbatch options, e.g. {account = "abc", mem = "16G", cpus-per-task = 4, exclusive = true}',
    )

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value):
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # minutes, as a TOML number
        if value is not None and not (isinstance(value, str) and _SLURM_TIME.fullmatch(value)):
            raise ValueError(f"{value!r} is not a Slurm time limit; give {SLURM_TIME_FORMS}")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict) -> dict:
        options = {}
        for key, setting in value.items():
            name = key.replace("_", "-")  # sbatch's spelling
            if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                raise ValueError(f"{key!r} is not an sbatch option name (such as account or mem-per-cpu)")
            if name in _SBATCH_TAKEN:
                raise ValueError(f"{key!r} {_SBATCH_TAKEN[name]}")
            if setting is not False:  # `exclusive = false` means: leave the flag out
                options[name] = setting
        return options


def parse_sbatch_options(pairs: list[str]) -> dict[str, str | bool]:
    """`--slurm-option` values: `["account=abc", "exclusive", "hold=true"]` -> {"account": "abc", "exclusive": True,
    "hold": True}: `true` and `false` mean what they mean in a config file (a bare flag, no flag)."""
    options: dict[str, str | bool] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key.strip():
            raise InputError(f"--slurm-option '{pair}' is not of the form key=value (or a bare flag such as exclusive)")
        value = value.strip()
        options[key.strip()] = {"true": True, "false": False}.get(value.lower(), value) if sep else True
    return options


# One n_timesteps value of the grid.
NTimesteps = Annotated[int, Field(gt=0, le=MAX_TIMESTEPS)]


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        description="built-in model (see `roundoff list`), package.module:factory or path/to/file.py:factory"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="model options, as `-o key=value`")
    seeds: list[int] | None = Field(
        None,
        description=(
            "seeds the factory builds the model with, each a run of the grid with its own references; the verdict "
            "judges each setup on its worst seed (default: one, the model option seed)"
        ),
    )
    data: str | None = Field(None, description="NAME[:PATH][?key=value&...] (e.g. bsds300:BSDS300.hdf5?split=test)")
    checkpoint: str | list[str] | None = Field(
        None,
        description=(
            "trained weights for the model's ODE function: a weights file, a `roundoff train` folder (each of its "
            "checkpoints), or a comma list (or list) of both"
        ),
    )
    timesteps: list[NTimesteps] = Field(default_factory=lambda: list(DEFAULT_TIMESTEPS))
    method: list[str] = Field(default_factory=lambda: list(DEFAULT_METHODS))
    library: list[str] | None = None
    dtype: list[str] | None = None
    scaling: list[str] | None = None
    mode: list[str] = Field(default_factory=lambda: ["autocast"])
    loss_in: list[str] | None = Field(
        None,
        description=(
            "where the loss is formed: float32 (after the solve, outside autocast, from the output cast to float32; "
            "for a model given as a training step, autocast around its solves only) or autocast (inside the autocast "
            "block; for a training step, the whole step under autocast). Default: float32 for a model of (func, y0, "
            "loss), autocast for a training step"
        ),
    )
    device: str = "auto"
    repeats: PositiveInt = 1
    timeout: float | None = Field(None, ge=MIN_TIMEOUT_S, allow_inf_nan=False, description="seconds per configuration")
    scaler: ScalerSettings = Field(default_factory=ScalerSettings)
    noise_batches: int = Field(
        DEFAULT_NOISE_BATCHES,
        ge=0,
        description="batches of the model's data for the gradient noise (0: do not measure it)",
    )
    noise_batch_size: PositiveInt | None = Field(
        None,
        description=(
            "points per batch of the gradient noise, the batch you train with (default: the batch the checkpoint's "
            "training drew, else the sweep's batch)"
        ),
    )
    loss_scale: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description="multiplies the loss before the backward (e.g. 1e-10 to study underflow)",
    )
    executor: str | None = Field(
        None,
        description=(
            "where the configurations run: local, processes or slurm (default: processes "
            "when more than one worker runs, else local)"
        ),
    )
    workers: PositiveInt | None = Field(
        None,
        description=(
            "worker processes on this machine (executor processes; default: one "
            "per core for a grid of 2,000 or more right-hand-side evaluations on the CPU, else 1)"
        ),
    )
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    rtol: float = Field(
        1e-3, gt=0, allow_inf_nan=False, description="adaptive methods: relative tolerance of the step control"
    )
    atol: float = Field(
        1e-6, gt=0, allow_inf_nan=False, description="adaptive methods: absolute tolerance of the step control"
    )
    max_steps: PositiveInt = Field(
        1000, description="adaptive methods: steps a solve may attempt, accepted and rejected together"
    )
    arithmetic: list[str] | None = Field(
        None, description="hardware, emulated (default: each dtype's own; emulated for stochastic rounding)"
    )
    rounding: list[str] | None = Field(
        None, description="nearest, stochastic (emulated arithmetic only; default nearest)"
    )
    cpu_memory: bool = Field(
        False,
        description=(
            "on the CPU, fill peak_memory_bytes from the allocator's profiler events, "
            "in one extra untimed run per configuration"
        ),
    )
    timing: bool = Field(
        True,
        description=(
            "after the sweep, time the setups the answer compares again, interleaved, at least 5 repeats within about "
            "10% of the sweep's time (timing.parquet); false: the answer's cost is each run's single timing"
        ),
    )
    allow_oom: bool = Field(
        False,
        description=(
            "run a grid whose estimated memory is far beyond the device's, recording what "
            "cannot fit as oom rows (without it such a grid is refused)"
        ),
    )
    fp8_scaling: bool = Field(
        True,
        description=(
            "emulated formats of 8 bits or fewer: per-tensor power-of-two scaling of low-precision op inputs "
            "and outputs"
        ),
    )

    @field_validator("rounding", mode="after")
    @classmethod
    def _rounding_needs_emulation(cls, value, info: ValidationInfo):
        if info.data.get("arithmetic") == ["hardware"] and any(r != "nearest" for r in value or []):
            raise ValueError("other than nearest needs --arithmetic emulated (hardware rounds to nearest)")
        return value

    threads: PositiveInt | None = Field(
        None, description="torch threads per process (default: chosen from the problem's size)"
    )
    keep_float32: list[str] | None = Field(
        None,
        description=(
            "modules of the vector field run in float32 out of autocast: none, or module names or glob patterns "
            "joined with + (e.g. potential.layers.0, *norm*); each value a run of the grid (default: none)"
        ),
    )
    per_module: bool = Field(
        False,
        description=(
            "measure each module of the vector field per time step, forward and backward, "
            "in one extra untimed run per configuration (modules.parquet)"
        ),
    )

    @field_validator("keep_float32")
    @classmethod
    def _keep_float32(cls, value: list[str] | None) -> list[str] | None:
        from ..axes.keep_float32 import check_value

        if value is not None and not value:
            raise ValueError("needs at least one value: none, or module names or glob patterns joined with +")
        return None if value is None else [check_value(v) for v in value]

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and not value:
            raise ValueError("needs at least one seed")
        return value  # a seed given twice runs once; the grid says so

    @field_validator("timesteps")
    @classmethod
    def _timesteps(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one n_timesteps value")
        return sorted(value)  # a value given twice runs once; the grid says so

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, value: str | list[str] | None) -> str | None:
        # Kept as one comma list: the form the command line gives, expanded into files when the sweep is planned.
        if value is None:
            return None
        items = [
            part.strip()
            for item in ([value] if isinstance(value, str) else value)
            for part in item.split(",")
            if part.strip()
        ]
        if not items:
            raise ValueError("needs at least one weights file or train folder")
        return ",".join(items)

    @field_validator("data")
    @classmethod
    def _data(cls, value: str | None) -> str | None:
        return checked_data(value)

    @field_validator(*AXES)
    @classmethod
    def _axis_names(cls, value, info: ValidationInfo):
        assert info.field_name is not None  # pydantic names the field a field validator runs for
        if info.field_name == "library":
            load_libraries(value)
        return names_in(axis_registry(info.field_name), value)

    @field_validator("executor")
    @classmethod
    def _executor(cls, value: str | None) -> str | None:
        allowed = axis_names("executors")
        if value is not None and value not in allowed:
            raise ValueError(f"unknown executor {shortened(value)!r}; allowed: {', '.join(allowed)}")
        return value

    @property
    def executor_name(self) -> str:
        """The executor asked for; without one, worker processes when more than one worker is asked for."""
        return self.executor or ("processes" if (self.workers or 1) > 1 else "local")


def checked_data(value: str | None) -> str | None:
    """A `data` value after checking its source, file and options (a ValueError, which pydantic reports against the
    key)."""
    from ..axes.data import parse_data

    if value is not None:
        try:
            parse_data(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None
    return value


def load_libraries(names: list[str] | None) -> None:
    """Libraries named by their location (a user's) are loaded and registered here; a missing package says how to
    install it."""
    from ..axes.libraries import resolve_library

    for name in names or ():
        try:
            resolve_library(name)
        except InputError as exc:  # pydantic reports ValueErrors against the key
            raise ValueError(str(exc)) from None


@overload
def validate(values: dict[str, Any], source: str = ..., schema: None = None) -> SweepConfig: ...


@overload
def validate(values: dict[str, Any], source: str, schema: type[ConfigT]) -> ConfigT: ...


def validate(values: dict[str, Any], source: str = "command line", schema: type[BaseModel] | None = None) -> BaseModel:
    """`values` as a SweepConfig (or `schema`, such as training's config); a problem is one InputError line."""
    schema = schema or SweepConfig
    given_bool = bool_given_for_number(values, schema)
    if given_bool is not None:
        raise InputError(
            f"{source}: '{given_bool[0]}' must be {'numbers' if isinstance(given_bool[1], list) else 'a number'}, "
            f"not true or false (got {given_bool[1]!r})"
        )
    try:
        return schema(**values)
    except ValidationError as exc:
        errors = exc.errors()
        unknown = [err for err in errors if err["type"] == "extra_forbidden"]
        prefix = f"{source}: " if source else ""
        if unknown:  # every unknown key at once: a file with three typos is not fixed in three attempts
            raise InputError(f"{prefix}{_unknown_keys(unknown, schema)}") from None
        err = errors[0]
        raise InputError(f"{prefix}'{location(err)}' {phrase(err)}") from None


def _unknown_keys(errors: list[ErrorDetails], schema: type[BaseModel]) -> str:
    """`'a', 'b' unknown keys; allowed: ...`, for each table that holds some (the top level, [slurm], ...)."""
    tables: dict[tuple, list[ErrorDetails]] = {}
    for err in errors:
        tables.setdefault(tuple(err["loc"][:-1]), []).append(err)
    parts = []
    for found in tables.values():
        names = ", ".join(repr(location(err)) for err in found)
        parts.append(
            f"{names} unknown key{'s' if len(found) > 1 else ''}; allowed: "
            f"{', '.join(_keys_at(found[0]['loc'], schema))}"
        )
    return "; ".join(parts)


def _keys_at(loc: tuple, model: type[BaseModel]) -> list[str]:
    """The keys allowed where an unknown key was found: the top level's, or those of a table such as [slurm]."""
    for part in loc[:-1]:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    return list(model.model_fields)


def merged(base: Any, override: Any) -> Any:
    """Tables merge key by key, all the way down; any other value is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {**base, **{key: merged(base.get(key), value) for key, value in override.items()}}
    return override


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise InputError(f"config file '{path}' is a folder; give the path of a TOML file")
    if not path.is_file():
        raise InputError(f"config file '{path}' does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"config file '{path}' is not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"config file '{path}' is not valid TOML: it is nested too deeply to be read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"config file '{path}' cannot be read: {exc}") from None


def resolve(file: str | Path | None, overrides: dict[str, Any], source: str = "command line") -> SweepConfig:
    """File values, then command-line values on top (tables such as model options, scaler and slurm settings merge key
    by key).
    `source` is what an error calls the overrides ("" from Python: the key alone says where)."""
    values: dict[str, Any] = load_toml(file) if file else {}
    if file:
        # Checked on its own first, so that a mistake in the file is reported against the file.
        validate({"model": overrides.get("model") or "unset", **values}, f"config file '{file}'")
    for key, value in overrides.items():
        if value is None:
            continue
        values[key] = merged(values.get(key), value)
    return validate(values, source)
