"""A user's own model: `package.module:factory` or `path/to/file.py:factory`.

The factory's keyword parameters are its options: `-o key=value` strings are checked and converted
by pydantic against the parameters' annotations (or their defaults' types), and an unknown key is
refused like a built-in model's. The factory returns a `Problem(model=..., step=..., sample_batch=...)`,
the training step as the user wrote it (problem.py), or the special case `(func, y0, loss)`: the
right-hand side as an `nn.Module` f(t, y), the initial state, and the loss of the whole trajectory of
shape (N+1, *y0.shape); optionally a fourth element, `sample_batch(k)`, that returns batch k >= 1 of
the model's data as an initial state shaped like y0, for the gradient-noise measurement. It runs after
`torch.manual_seed(seed)`, so weights it draws are the same in every run of a sweep and in a resumed one.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from pydantic import ConfigDict, Field, TypeAdapter, create_model

from ...core.errors import InputError, one_line
from ...core.user_code import load_attribute, quit_line
from ..data import DataRequest
from .base import SEED_RANGE, ModelOptions
from .inputs import floating_inputs, on_device
from .problem import ModelProblem, NoMoreBatches, Problem, TrajectoryProblem

FORMS = "package.module:factory or path/to/file.py:factory"


class _OpenOptions(ModelOptions):
    """Options of a factory that takes **kwargs: keys it does not name pass through as strings."""

    model_config = ConfigDict(extra="allow")


class FactoryModel:
    """A ModelSpec around a user's factory function."""

    default_data = None  # the factory brings its own data

    def __init__(self, name: str, factory: Callable[..., Any]) -> None:
        self.name = name
        self.factory = factory
        doc = inspect.getdoc(factory)
        self.description = doc.splitlines()[0] if doc else f"your model, built by {name}"
        self.parameters = inspect.signature(factory, eval_str=True).parameters
        self.takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in self.parameters.values())
        self.takes_seed = self.takes_any or "seed" in self.parameters  # another seed draws other weights
        self.options_type = _options_type(name, self.parameters, self.takes_any)

    def build(self, options: ModelOptions, device: torch.device, data: DataRequest | None = None) -> ModelProblem:
        if data is not None:
            raise InputError(f"model {self.name} builds its own data in its factory; --data is for the built-in models")
        arguments = {k: v for k, v in options.model_dump().items() if self.takes_any or k in self.parameters}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(options.seed)
            try:
                made = self.factory(**arguments)
            except InputError:
                raise
            except SystemExit as exc:
                raise InputError(quit_line(f"model {self.name}: the factory", exc)) from None
            except Exception as exc:  # noqa: BLE001 - the user's code failed; say where, in one line
                raise InputError(f"model {self.name}: the factory raised {one_line(exc)}") from None
        if isinstance(made, Problem):
            return _step_problem(self.name, made, device)
        return _trajectory_problem(self.name, made, device)


def _step_problem(name: str, made: Problem, device: torch.device) -> Problem:
    """The factory's Problem with its model and batches in float32 on the sweep's device; batch 0 drawn now, so that
    a sampler that cannot give it is one line."""
    if not isinstance(made.model, torch.nn.Module) or not callable(made.step) or not callable(made.sample_batch):
        got = f"model={type(made.model).__name__}, step={type(made.step).__name__}"
        raise InputError(
            f"model {name}: the factory's Problem has {got}, sample_batch={type(made.sample_batch).__name__}; "
            "expected an nn.Module, a function step(model, batch, odeint) and a function sample_batch(k)"
        )
    sample = made.sample_batch

    def sample_batch(k: int) -> Any:
        try:
            batch = sample(k)
        except (NoMoreBatches, IndexError) as exc:
            raise NoMoreBatches(f"sample_batch({k}) has no batch {k} ({one_line(exc)})") from None
        return on_device(batch, device)

    try:
        batch0 = sample_batch(0)
    except SystemExit as exc:
        raise InputError(quit_line(f"model {name}: sample_batch(0)", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's sampler failed on the sweep's own batch
        raise InputError(f"model {name}: sample_batch(0), the sweep's fixed batch, raised {one_line(exc)}") from None
    if not floating_inputs(batch0) and not any(True for _ in made.model.parameters()):
        raise InputError(f"model {name}: neither the batch nor the model holds a floating-point tensor to measure")
    first = batch0

    def sampled(k: int) -> Any:
        return first if k == 0 else sample_batch(k)

    return Problem(
        model=made.model.to(device=device, dtype=torch.float32),
        step=made.step,
        sample_batch=sampled,
        data_source=made.data_source,
        notes=made.notes,
        batch_size=made.batch_size,
        solve_of_record=made.solve_of_record,
    )


def _trajectory_problem(name: str, made: Any, device: torch.device) -> TrajectoryProblem:
    func, y0, loss, sample_batch = _unpack(name, made)
    func = func.to(device=device, dtype=torch.float32)
    y0 = y0.detach().to(device=device, dtype=torch.float32)
    _check_contract(name, func, y0, loss)
    sampler = None
    if sample_batch is not None:

        def sampler(k: int) -> torch.Tensor:
            batch = sample_batch(k)
            if not isinstance(batch, torch.Tensor) or batch.shape != y0.shape:
                raise InputError(
                    f"model {name}: sample_batch({k}) returned "
                    f"{getattr(batch, 'shape', type(batch).__name__)}; expected y0's shape {tuple(y0.shape)}"
                )
            return batch.detach().to(device=device, dtype=torch.float32)

    return TrajectoryProblem(
        func=func, y0=y0, loss=loss, data_source=f"built by the factory {name}", batch_sampler=sampler
    )


def load_factory(name: str) -> FactoryModel:
    """Import the module or file that `name` points to and wrap its factory; every failure is one line."""
    module, attribute, factory = load_attribute(f"model '{name}'", name, FORMS)
    target = name.rpartition(":")[0]
    if factory is None:
        defined = [k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__]
        raise InputError(
            f"model '{name}': {target} has no factory '{attribute}' (it defines: "
            f"{', '.join(defined) or 'no functions'})"
        )
    if not callable(factory):
        raise InputError(f"model '{name}': {target}.{attribute} is a {type(factory).__name__}, not a function")
    _check_is_a_factory(name, module, target, attribute, factory)
    try:
        return FactoryModel(name, factory)
    except (
        NameError,
        TypeError,
        ValueError,
    ) as exc:  # annotations that do not evaluate, or a signature pydantic refuses
        raise InputError(f"model '{name}': cannot read the factory's options: {one_line(exc)}") from None


def _check_is_a_factory(name: str, module, target: str, attribute: str, factory) -> None:
    """Only what can be a model factory is ever called: a Python function or class defined in the module the
    user named (not one it imported, such as `os.system` seen through `os`), outside Python's standard
    library, whose options can all be given by keyword. Checked before it is called."""
    if module.__name__.split(".")[0] in sys.stdlib_module_names:
        raise InputError(
            f"model '{name}': {target} is part of Python's standard library, not a module of model factories"
        )
    if not (inspect.isfunction(factory) or inspect.isclass(factory)):
        raise InputError(
            f"model '{name}': {target}.{attribute} is a {type(factory).__name__}; a factory is a Python function "
            f"(or class) defined in {target}"
        )
    if getattr(factory, "__module__", None) != module.__name__:
        raise InputError(
            f"model '{name}': {target}.{attribute} is defined in {factory.__module__}, not in {target}; "
            "name the module that defines the factory"
        )
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError) as exc:
        raise InputError(f"model '{name}': cannot read the factory's signature: {one_line(exc)}") from None
    positional = [
        p.name
        for p in parameters
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.default is inspect.Parameter.empty
    ]
    if positional:
        raise InputError(
            f"model '{name}': the factory's parameter(s) {', '.join(positional)} are positional-only; "
            "options are given by keyword"
        )


def _option_annotation(name: str, option: str, annotation: Any) -> Any:
    """`annotation` where pydantic can convert `-o` text to it; anything else (torch.Tensor, a class of the user's) is
    refused in one line naming the option, not with pydantic's schema error."""
    try:
        TypeAdapter(annotation)
    except Exception as exc:  # noqa: BLE001 - PydanticSchemaGenerationError and whatever else an odd annotation raises
        shown = getattr(annotation, "__qualname__", None) or repr(annotation)
        raise InputError(
            f"model '{name}': the factory's option '{option}' is annotated {shown}, which an -o value cannot be "
            f"converted to ({type(exc).__name__}); annotate it with int, float, str, bool or a list of them"
        ) from None
    return annotation


def _options_type(name: str, parameters, takes_any: bool) -> type[ModelOptions]:
    fields: dict[str, Any] = {}
    for parameter in parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        has_default = parameter.default is not inspect.Parameter.empty
        if parameter.annotation is not inspect.Parameter.empty:
            annotation = _option_annotation(name, parameter.name, parameter.annotation)
        else:
            annotation = type(parameter.default) if has_default and parameter.default is not None else Any
        fields[parameter.name] = (annotation, parameter.default if has_default else ...)
    if "seed" in fields:  # the factory runs after torch.manual_seed(seed): keep torch's range
        fields["seed"] = (int, Field(fields["seed"][1], ge=SEED_RANGE[0], le=SEED_RANGE[1]))
    return create_model("FactoryOptions", __base__=_OpenOptions if takes_any else ModelOptions, **fields)


def _unpack(name: str, made: Any) -> tuple[torch.nn.Module, torch.Tensor, Callable, Callable | None]:
    expected = (
        "a roundoff_analyzer.Problem(model=..., step=..., sample_batch=...), or (func, y0, loss) or "
        "(func, y0, loss, sample_batch): an nn.Module f(t, y), a floating-point tensor, a callable of the trajectory, "
        "and optionally a callable of the batch number"
    )
    if not isinstance(made, (tuple, list)) or len(made) not in (3, 4):
        raise InputError(f"model {name}: the factory returned {type(made).__name__}; expected {expected}")
    func, y0, loss, sample_batch = (*made, None) if len(made) == 3 else made
    if (
        not isinstance(func, torch.nn.Module)
        or not isinstance(y0, torch.Tensor)
        or not y0.is_floating_point()
        or not callable(loss)
        or not (sample_batch is None or callable(sample_batch))
    ):
        got = f"({type(func).__name__}, {getattr(y0, 'dtype', type(y0).__name__)}, {type(loss).__name__})"
        raise InputError(f"model {name}: the factory returned {got}; expected {expected}")
    return func, y0, loss, sample_batch


def _check_contract(name: str, func: torch.nn.Module, y0: torch.Tensor, loss: Callable) -> None:
    """One float32 evaluation of f and of the loss, so that a broken contract is one line now, not a failed row per
    run."""
    try:
        with torch.no_grad():
            derivative = func(torch.zeros((), device=y0.device), y0)
            value = loss(torch.stack([y0, y0]))
    except SystemExit as exc:
        raise InputError(quit_line(f"model {name}: evaluating f(0, y0) and the loss", exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's code failed on its own initial state
        raise InputError(f"model {name}: evaluating f(0, y0) and the loss raised {one_line(exc)}") from None
    if not isinstance(derivative, torch.Tensor) or derivative.shape != y0.shape:
        shape = tuple(getattr(derivative, "shape", ()))
        raise InputError(f"model {name}: f(t, y0) returned shape {shape}; expected y0's {tuple(y0.shape)}")
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        got = (
            f"a tensor of shape {tuple(value.shape)}"
            if isinstance(value, torch.Tensor)
            else f"a {type(value).__name__}"
        )
        raise InputError(f"model {name}: loss(trajectory) must return a scalar tensor, got {got}")
