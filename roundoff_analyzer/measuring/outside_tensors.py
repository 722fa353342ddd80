"""Trainable tensors a step reaches outside its model: a module kept in a plain list or dict (not a submodule), a global
`nn.Parameter`, a tensor that requires grad closed over by the step, the parameters of the model the factory built where
the step should use the one it is handed. Gradients reach them, but a sweep measures the gradients of the model's
parameters (and of the batch) only, so the parameter-gradient error would cover less than the step trains, and nothing
would say so; the sweep refuses instead, before running, naming each tensor, its shape and where it was found.

Found in the contract check's float64 evaluation: every leaf of the loss's autograd graph that requires grad and is
neither one of the model's parameters nor one of the batch's tensors, less those the step made itself (a state
detached to take a trace inside the field, `z.detach().requires_grad_()`: nothing trains it). Where the evaluation
fails instead (a float32 module outside the float64 model meets float64 values), the tensors outside the model that its
operations were handed are named: they are why the reference cannot run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from ..axes.parameter_uses import tensors_in
from ..core.errors import InputError

# The attributes every module has (its registries of parameters, buffers and submodules, its hooks, its flags): what a
# module holds besides them is held outside its registries.
_MODULE_OWN = frozenset(vars(nn.Module()))
REGISTER = (
    "register it in the model (a submodule, an nn.ModuleList or nn.ModuleDict, an nn.Parameter attribute), or set its "
    "requires_grad to False where it is not trained"
)


class OutsideTensors(TorchFunctionMode):
    """Watches the step's evaluation: the tensors its operations made, and the trainable leaves they were handed that
    are not among `known` (the model's parameters and the batch's tensors) nor made by the step."""

    def __init__(self, known: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self.known = {id(x): x for x in known}  # held, so that an id stays its tensor's
        self.made: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._used: dict[int, torch.Tensor] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        given = list(tensors_in((args, kwargs)))
        for x in given:
            if x.requires_grad and x.grad_fn is None and id(x) not in self.known and x not in self.made:
                self._used.setdefault(id(x), x)
        out = func(*args, **kwargs)
        inputs = {id(x) for x in given}
        for x in tensors_in(out):
            if id(x) not in inputs:  # `W.requires_grad_()` returns W itself: W was not made here
                self.made[x] = True
        return out

    def reached(self, loss: torch.Tensor) -> list[torch.Tensor]:
        """The leaves of the loss's graph that gradients reach outside the model and the batch, in the order first
        met. A known tensor that is not a leaf (a scripted module's parameter in a copy of the model: computed from the
        original's) ends the walk: what it was computed from is not trained through it."""
        boundary = {(id(x.grad_fn), x.output_nr) for x in self.known.values() if x.grad_fn is not None}
        found: dict[int, torch.Tensor] = {}
        seen: set[int] = set()
        stack = [(loss.grad_fn, loss.output_nr)]
        while stack:
            node, index = stack.pop()
            if node is None or (id(node), index) in boundary or id(node) in seen:
                continue
            seen.add(id(node))
            variable = getattr(node, "variable", None)  # a leaf's AccumulateGrad
            if variable is not None:
                if id(variable) not in self.known and variable not in self.made:
                    found.setdefault(id(variable), variable)
                continue
            stack.extend(node.next_functions)
        return list(found.values())

    def used(self) -> list[torch.Tensor]:
        """The trainable tensors outside the model and the batch that the step's operations were handed, in the order
        first handed."""
        return list(self._used.values())


def refusal(
    what: str,
    tensors: list[torch.Tensor],
    model: nn.Module,
    built: nn.Module,
    functions: Iterable[Callable],
    verb: str = "trains",
) -> InputError:
    """The line refusing `what`'s step, which `verb` `tensors` outside `model` (the run's copy of the model the factory
    `built`); `functions`: the step's own (their closures and globals are searched)."""
    first = tensors[0]
    more = f" and {len(tensors) - 1} more such tensor{'s' if len(tensors) > 2 else ''}" if len(tensors) > 1 else ""
    kind = f"a {str(first.dtype).removeprefix('torch.')} {_kind(first)} of shape {_shape(first)}"
    own = next((f"model.{path}" for path, p in built.named_parameters() if p is first), None)
    if own is not None and built is not model:
        return InputError(
            f"{what}: its step computes with `{own}` of the model its factory built ({kind}){more}, not with the "
            "model it is handed: the sweep runs the step on a copy of the model in each precision (float64 for the "
            "reference), so compute with the step's `model` argument"
        )
    found = where_found(first, model, list(functions))
    held = (
        f"`{found[0]}`, {found[1]} ({kind})"
        if found
        else f"{kind} held by none of the model's attributes, the step's variables or their modules' globals"
    )
    return InputError(
        f"{what}: its step {verb} {held}{',' if found and more else ''}{more}, not among the model's parameters, so "
        f"the sweep would not measure {'their gradients' if more else 'its gradient'}; {REGISTER}"
    )


def where_found(x: torch.Tensor, model: nn.Module, functions: list[Callable]) -> tuple[str, str] | None:
    """Where `x` is held, and what that place is: an attribute of one of the model's modules outside its registries, a
    variable the step closes over, or a global of a module that defines the step or one of the model's classes."""
    for prefix, module in model.named_modules():
        for attribute, value in vars(module).items():
            if attribute not in _MODULE_OWN:
                path = _path_in(x, value, ".".join(filter(None, ("model", prefix, attribute))))
                if path is not None:
                    return path, "an attribute of the model that is not a submodule"
    for function in functions:
        function = getattr(function, "__func__", function)
        code = getattr(function, "__code__", None)
        for variable, cell in zip(code.co_freevars if code else (), getattr(function, "__closure__", None) or ()):
            path = _path_in(x, _contents(cell), variable)
            if path is not None:
                return path, "closed over by the step"
    for namespace in _namespaces(model, functions):
        for variable, value in list(vars(namespace).items()):
            path = _path_in(x, value, variable)
            if path is not None:
                return path, f"a global of {_file_name(namespace)}"
    return None


def _kind(x: torch.Tensor) -> str:
    return "parameter" if isinstance(x, nn.Parameter) else "tensor"


def _shape(x: torch.Tensor) -> str:
    return "×".join(str(n) for n in x.shape) or "()"


def _path_in(x: torch.Tensor, value: Any, path: str, depth: int = 2) -> str | None:
    if value is x:
        return path
    if isinstance(value, nn.Module):
        return next((f"{path}.{name}" for name, p in value.named_parameters() if p is x), None)
    if depth and isinstance(value, (list, tuple)):
        return _first(_path_in(x, item, f"{path}[{i}]", depth - 1) for i, item in enumerate(value))
    if depth and isinstance(value, dict):
        return _first(_path_in(x, item, f"{path}[{key!r}]", depth - 1) for key, item in value.items())
    return None


def _first(paths: Iterator[str | None]) -> str | None:
    return next((path for path in paths if path is not None), None)


def _contents(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a variable not assigned yet
        return None


def _namespaces(model: nn.Module, functions: list[Callable]) -> list[Any]:
    """The modules defining the step's functions and the model's classes, each once."""
    names = [getattr(f, "__module__", None) for f in functions] + [type(m).__module__ for m in model.modules()]
    modules = {name: sys.modules.get(name) for name in names if name}
    return [module for module in modules.values() if module is not None]


def _file_name(module) -> str:
    file = getattr(module, "__file__", None)
    return Path(file).name if file else module.__name__
