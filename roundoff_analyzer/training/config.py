"""What `roundoff train` is asked to do, validated: from a TOML file, the command line, or both (the command line wins)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, conint, field_validator

from ..axes.scaler_settings import ScalerSettings
from ..core.errors import InputError
from ..planning.config import axis_registry, load_libraries, merged, names_in, checked_data, load_toml
from ..planning.config import validate as validate_schema

DEFAULT_ITERS = 2000
DEFAULT_RESUME_EVERY = 100
DEFAULT_VAL_BATCHES = 4


class SetupEntry(BaseModel):
    """One `[[setups]]` table: a (library, dtype, scaling) to train, where the product of the lists is not wanted."""

    model_config = ConfigDict(extra="forbid")
    dtype: str
    library: str = "native"
    scaling: str = "none"

    @field_validator("dtype", "library", "scaling")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if info.field_name == "library":
            load_libraries([value])
        return names_in(axis_registry(info.field_name), [value])[0]


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="built-in model (see `roundoff list`), package.module:factory or path/to/file.py:factory")
    options: dict[str, Any] = Field(default_factory=dict, description="model options, as `-o key=value`")
    data: str | None = Field(None, description="NAME[:PATH][?key=value&...] (e.g. 2spirals)")
    iters: PositiveInt = Field(DEFAULT_ITERS, description="Adam steps per setup")
    save_at: list[conint(ge=0)] | None = Field(None, description="iterations whose weights are saved (default: 0; the last is always saved)")  # type: ignore[valid-type]
    resume_every: PositiveInt = Field(DEFAULT_RESUME_EVERY, description="iterations between resume states (besides every checkpoint)")
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False, description="Adam's learning rate")
    val_batches: PositiveInt = Field(DEFAULT_VAL_BATCHES, description="held-out batches of the validation loss")
    val_every: PositiveInt | None = Field(None, description="iterations between validation losses besides the saved ones (default: saved ones only)")
    timesteps: conint(gt=0) = Field(32, description="n_timesteps of every setup's solves (one value)")  # type: ignore[valid-type]
    method: str = Field("rk4", description="fixed-grid method of every setup (one value)")
    library: list[str] = Field(default_factory=lambda: ["native"])
    dtype: list[str] = Field(default_factory=lambda: ["float32"])
    scaling: list[str] = Field(default_factory=lambda: ["none"])
    setups: list[SetupEntry] | None = Field(None, description="exact (library, dtype, scaling) setups instead of the product of the lists")
    mode: str = Field("autocast", description="one mode for every setup")
    device: str = "auto"
    threads: PositiveInt | None = Field(None, description="torch threads (default: chosen from the problem's size, as the sweep does)")
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
        return list(dict.fromkeys(names_in(axis_registry(info.field_name), value)))

    @field_validator("method", "mode")
    @classmethod
    def _single_name(cls, value: str, info: ValidationInfo) -> str:
        return names_in(axis_registry(info.field_name), [value])[0]


def validate(values: dict[str, Any], source: str = "command line") -> TrainConfig:
    config = validate_schema(values, source, TrainConfig)
    beyond = [k for k in config.save_at or () if k > config.iters]
    if beyond:
        raise InputError(f"{source}: 'save_at' has iterations beyond iters {config.iters}: {', '.join(map(str, beyond))}")
    return config


def save_points(config: TrainConfig) -> list[int]:
    """The iterations whose weights are saved: those asked for (iteration 0 by default) and always the last."""
    return sorted({*(config.save_at if config.save_at is not None else [0]), config.iters})


def resolve(file: str | Path | None, overrides: dict[str, Any]) -> TrainConfig:
    """File values, then command-line values on top (tables such as model options and scaler settings merge key by key)."""
    values: dict[str, Any] = load_toml(file) if file else {}
    if file:
        # Checked on its own first, so that a mistake in the file is reported against the file.
        validate({"model": overrides.get("model") or "unset", **values}, f"config file '{file}'")
    if any(overrides.get(axis) is not None for axis in ("library", "dtype", "scaling")):
        values.pop("setups", None)  # lists named on the command line replace the file's own setups
    for key, value in overrides.items():
        if value is not None:
            values[key] = merged(values.get(key), value)
    return validate(values)
