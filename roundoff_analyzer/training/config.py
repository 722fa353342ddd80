"""What `roundoff train` is asked to do, validated: from a TOML file, the command line, or
both (the command line wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationInfo, field_validator

from ..axes.names import axis_names
from ..axes.scaler_settings import ScalerSettings
from ..core.errors import InputError
from ..core.registry import Registry
from ..planning.config import axis_registry, checked_data, load_libraries, load_toml, merged, names_in
from ..planning.config import validate as validate_schema

DEFAULT_ITERS = 2000
DEFAULT_RESUME_EVERY = 100
DEFAULT_VAL_BATCHES = 4


MASTER_WEIGHTS = "float32"
STATE_IN = ("float32", "weights")  # where the optimizer's state lives: float32, or the weights' own format


def _training_registry(axis: str):
    """The registries of the training's own axes, imported when a value is checked (they import torch)."""
    if axis == "weights":
        from ..axes.dtypes import DTYPES

        return DTYPES
    if axis == "update":
        from .updates import UPDATES

        return UPDATES
    return axis_registry(axis)


def _check_state(value: str | None) -> None:
    if value is not None and value not in STATE_IN:
        raise ValueError(f"'{value}' is not a place for the optimizer's state; allowed: {', '.join(STATE_IN)}")


def _known(registry: Registry, values: list[str]) -> list[str]:
    """`values`, each known to `registry` (else a ValueError naming the unknown ones and what is allowed)."""
    known = names_in(registry, values)
    assert known is not None  # a list given, the same list back
    return known


def _field(info: ValidationInfo) -> str:
    assert info.field_name is not None  # a field validator's: it validates a field
    return info.field_name


class SetupEntry(BaseModel):
    """One `[[setups]]` table: a (library, dtype, scaling, weights, update) to train, where the product
    of the lists is not wanted."""

    model_config = ConfigDict(extra="forbid")
    dtype: str
    library: str = "native"
    scaling: str = "none"
    weights: str = MASTER_WEIGHTS
    update: str = "nearest"
    optimizer_state: str | None = None  # the config's `optimizer_state` where not given

    @field_validator("dtype", "library", "scaling", "weights", "update")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if info.field_name == "library":
            load_libraries([value])
        return _known(_training_registry(_field(info)), [value])[0]

    @field_validator("optimizer_state")
    @classmethod
    def _state(cls, value: str | None) -> str | None:
        _check_state(value)
        return value


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        description="built-in model (see `roundoff list`), package.module:factory or path/to/file.py:factory"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="model options, as `-o key=value`")
    data: str | None = Field(None, description="NAME[:PATH][?key=value&...] (e.g. 2spirals)")
    iters: PositiveInt = Field(DEFAULT_ITERS, description="optimizer steps per setup")
    save_at: list[NonNegativeInt] | None = Field(
        None, description="iterations whose weights are saved (default: 0; the last is always saved)"
    )
    resume_every: PositiveInt = Field(
        DEFAULT_RESUME_EVERY, description="iterations between resume states (besides every checkpoint)"
    )
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False, description="the optimizer's learning rate")
    val_batches: PositiveInt = Field(DEFAULT_VAL_BATCHES, description="held-out batches of the validation loss")
    val_every: PositiveInt | None = Field(
        None, description="iterations between validation losses besides the saved ones (default: saved ones only)"
    )
    timesteps: PositiveInt = Field(32, description="n_timesteps of every setup's solves (one value)")
    method: str = Field("rk4", description="fixed-grid method of every setup (one value)")
    library: list[str] = Field(default_factory=lambda: ["native"])
    dtype: list[str] = Field(default_factory=lambda: ["float32"])
    scaling: list[str] = Field(default_factory=lambda: ["none"])
    weights: list[str] = Field(
        default_factory=lambda: [MASTER_WEIGHTS],
        description="where the weights live: float32 master weights, or stored in bfloat16, float16, eXmY",
    )
    update: list[str] = Field(
        default_factory=lambda: ["nearest"],
        description=f"how a step is rounded into low-precision weights: {', '.join(axis_names('updates'))}",
    )
    optimizer_state: str = Field(
        "float32", description="where the optimizer's state (Adam's moments) lives: float32, or weights (their format)"
    )
    optimizer: str = Field(
        "adam", description="adam, adamw, sgd (momentum 0.9), or package.module:factory / path/to/file.py:factory"
    )
    clip_grad_norm: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="clip the unscaled gradient's norm to this"
    )
    setups: list[SetupEntry] | None = Field(
        None, description="exact (library, dtype, scaling, weights, update) setups instead of the product of the lists"
    )
    mode: str = Field("autocast", description="one mode for every setup")
    device: str = "auto"
    threads: PositiveInt | None = Field(
        None, description="torch threads (default: chosen from the problem's size, as the sweep does)"
    )
    scaler: ScalerSettings = Field(default_factory=ScalerSettings)

    @field_validator("save_at")
    @classmethod
    def _save_at(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else sorted(set(value))

    @field_validator("data")
    @classmethod
    def _data(cls, value: str | None) -> str | None:
        return checked_data(value)

    @field_validator("library", "dtype", "scaling")
    @classmethod
    def _axis_names(cls, value, info: ValidationInfo):
        if info.field_name == "library":
            load_libraries(value)
        return list(dict.fromkeys(_known(axis_registry(_field(info)), value)))

    @field_validator("weights", "update")
    @classmethod
    def _training_axis_names(cls, value, info: ValidationInfo):
        return list(dict.fromkeys(_known(_training_registry(_field(info)), value)))

    @field_validator("optimizer_state")
    @classmethod
    def _state(cls, value: str) -> str:
        _check_state(value)
        return value

    @field_validator("method", "mode")
    @classmethod
    def _single_name(cls, value: str, info: ValidationInfo) -> str:
        return _known(axis_registry(_field(info)), [value])[0]


def validate(values: dict[str, Any], source: str = "command line") -> TrainConfig:
    config = validate_schema(values, source, TrainConfig)
    assert isinstance(config, TrainConfig)  # validated as the schema it was given
    beyond = [k for k in config.save_at or () if k > config.iters]
    if beyond:
        raise InputError(
            f"{source}: 'save_at' has iterations beyond iters {config.iters}: {', '.join(map(str, beyond))}"
        )
    return config


def save_points(config: TrainConfig) -> list[int]:
    """The iterations whose weights are saved: those asked for (iteration 0 by default) and always the last."""
    return sorted({*(config.save_at if config.save_at is not None else [0]), config.iters})


def resolve(file: str | Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """File values, then command-line values on top (tables such as model options and scaler
    settings merge key by key)."""
    values: dict[str, Any] = load_toml(file) if file else {}
    if file:
        # Checked on its own first, so that a mistake in the file is reported against the file.
        validate({"model": overrides.get("model") or "unset", **values}, f"config file '{file}'")
    if any(overrides.get(axis) is not None for axis in ("library", "dtype", "scaling", "weights", "update")):
        values.pop("setups", None)  # lists named on the command line replace the file's own setups
    for key, value in overrides.items():
        if value is not None:
            values[key] = merged(values.get(key), value)
    return validate(values)
