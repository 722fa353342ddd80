"""What a sweep is asked to do, validated: from a TOML file, the command line, or both (the command line wins)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, ValidationInfo, field_validator

from .data import parse_data
from .dtypes import DTYPES
from .errors import InputError
from .libraries import LIBRARIES
from .methods import METHODS
from .modes import MODES
from .registry import Registry
from .scalings import SCALINGS, ScalerSettings

# Sized for a 2-core CPU: the bare `roundoff sweep --model otflow` finishes in well under 3 minutes.
DEFAULT_TIMESTEPS = (8, 32, 128)
DEFAULT_METHODS = ("euler", "rk4")


# Each sweep axis given by name, and the registry its names must come from.
AXIS_REGISTRIES: dict[str, Registry] = {"method": METHODS, "library": LIBRARIES, "dtype": DTYPES, "scaling": SCALINGS, "mode": MODES}


def _names_in(registry: Registry, values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    if not values:
        raise ValueError(f"needs at least one {registry.axis}; allowed: {', '.join(registry.names())}")
    unknown = [v for v in values if v not in registry]
    if unknown:
        raise ValueError(f"unknown {registry.axis} {', '.join(map(repr, unknown))}; allowed: {', '.join(registry.names())}")
    return values


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="built-in model (see `roundoff list`), package.module:factory or path/to/file.py:factory")
    options: dict[str, Any] = Field(default_factory=dict, description="model options, as `-o key=value`")
    data: str | None = Field(None, description="NAME[:PATH][?key=value&...] (e.g. bsds300:BSDS300.hdf5?split=test)")
    checkpoint: str | None = Field(None, description="file of trained weights for the model's ODE function")
    timesteps: list[PositiveInt] = Field(default_factory=lambda: list(DEFAULT_TIMESTEPS))
    method: list[str] = Field(default_factory=lambda: list(DEFAULT_METHODS))
    library: list[str] | None = None
    dtype: list[str] | None = None
    scaling: list[str] | None = None
    mode: list[str] = Field(default_factory=lambda: ["autocast"])
    device: str = "auto"
    repeats: PositiveInt = 1
    timeout: PositiveFloat | None = Field(None, description="seconds per configuration")
    scaler: ScalerSettings = Field(default_factory=ScalerSettings)
    loss_scale: PositiveFloat = Field(1.0, description="multiplies the loss before the backward (e.g. 1e-10 to study underflow)")

    @field_validator("timesteps")
    @classmethod
    def _timesteps(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one n_timesteps value")
        return sorted(set(value))

    @field_validator("data")
    @classmethod
    def _data(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_data(value)
            except InputError as exc:  # pydantic reports ValueErrors against the key
                raise ValueError(str(exc)) from None
        return value

    @field_validator(*AXIS_REGISTRIES)
    @classmethod
    def _axis_names(cls, value, info: ValidationInfo):
        return _names_in(AXIS_REGISTRIES[info.field_name], value)


def validate(values: dict[str, Any], source: str = "command line") -> SweepConfig:
    try:
        return SweepConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "?"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = f"unknown key; allowed: {', '.join(SweepConfig.model_fields)}"
        elif err["type"] == "missing":
            message = "is required"
        raise InputError(f"{source}: '{key}' {message}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"config file '{path}' does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"config file '{path}' is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"config file '{path}' cannot be read: {exc}") from None


def resolve(file: str | Path | None, overrides: dict[str, Any]) -> SweepConfig:
    """File values, then command-line values on top (model options and scaler settings merge key by key)."""
    values: dict[str, Any] = load_toml(file) if file else {}
    if file:
        # Checked on its own first, so that a mistake in the file is reported against the file.
        validate({"model": overrides.get("model") or "unset", **values}, f"config file '{file}'")
    for key, value in overrides.items():
        if value is None:
            continue
        values[key] = {**values.get(key, {}), **value} if key in ("options", "scaler") else value
    return validate(values)
