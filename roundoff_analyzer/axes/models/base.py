"""The model axis: a factory that turns validated options into a problem: a training step, or one ODE solve and the
loss of its trajectory (problem.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...core.errors import InputError
from ...core.registry import Registry
from ...core.validation import location, phrase
from ..data import Batch, DataRequest, parse_data
from .problem import ModelProblem

SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch's generators accept


class ModelOptions(BaseModel):
    """Base of every model's options: unknown keys are refused, strings from `-o` are coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(0, ge=SEED_RANGE[0], le=SEED_RANGE[1], description="seed of the weights and the batch")


OptionsT = TypeVar("OptionsT", bound=ModelOptions)


class ModelSpec(Protocol[OptionsT]):
    """A model: its options' type, and `build`, which takes options of that type. The attributes are read-only
    properties here so that a class attribute, a narrower type (`default_data = "synthetic"`) or a frozen field
    fulfils them."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def options_type(self) -> type[OptionsT]: ...

    @property
    def default_data(self) -> str | None:
        """The `--data` used when none is given; None for models that bring their own data (users' factories)."""
        ...

    def build(self, options: OptionsT, device: torch.device, data: DataRequest | None = None) -> ModelProblem:
        """The problem (a `Problem` or a `TrajectoryProblem`), its points from `data` (default: `default_data`)."""
        ...


MODELS: Registry[ModelSpec[Any]] = Registry("model")


def takes_seed(model: ModelSpec[Any]) -> bool:
    """Whether the model's weights follow its `seed` option: every built-in model's do; a user's factory says so with
    a `takes_seed` attribute (a `seed` parameter, or **kwargs that receive it)."""
    return getattr(model, "takes_seed", True)


def parse_options(model: ModelSpec[Any], raw: Mapping[str, Any]) -> ModelOptions:
    """Validate options (from `-o key=value` or a config file); one line per problem in the error."""
    try:
        return model.options_type(**dict(raw))
    except ValidationError as exc:
        allowed = ", ".join(model.options_type.model_fields)
        problems = "; ".join(f"option '{location(err)}' {phrase(err)}" for err in exc.errors())
        raise InputError(f"model {model.name}: {problems}; options are: {allowed}") from None


def parse_option_pairs(pairs: list[str]) -> dict[str, str]:
    """`["hidden=64", "alpha=1,2000,800"]` -> {"hidden": "64", "alpha": "1,2000,800"}."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"model option '{pair}' is not of the form key=value")
        options[key.strip()] = value.strip()
    return options


def seeded_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def load_batch(
    model: ModelSpec[Any],
    data: DataRequest | None,
    rows: int,
    columns: int,
    generator: torch.Generator,
    dimension_option: str | None = None,
    start: int = 0,
) -> Batch:
    """The model's fixed batch from `data`, or from the model's default source; a file is read from row `start`."""
    if data is None:
        # Built-in models call this, and each names its default source; users' factories bring their own data.
        assert model.default_data is not None, f"model {model.name} has no default data"
        data = parse_data(model.default_data)
    return data.load(rows, columns, generator, model.name, dimension_option, start)


def batch_sampler(
    model: ModelSpec[Any],
    data: DataRequest | None,
    options: ModelOptions,
    rows: int,
    columns: int,
    to_state: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
    dimension_option: str | None = None,
) -> Callable[[int], torch.Tensor]:
    """Batch k of the model's data as an initial state: a generated source draws it with a seed of its own
    (never the seed of the weights and batch 0), a file gives its rows k·rows … (k+1)·rows − 1."""

    def sample(k: int) -> torch.Tensor:
        generator = seeded_generator((options.seed * 1_000_003 + k) % 2**63)
        points = load_batch(model, data, rows, columns, generator, dimension_option, start=k * rows).points
        return to_state(points).to(device)

    return sample
