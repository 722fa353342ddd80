"""Which module's parameters an operation uses: the parameter itself, or a view of it (`layer.weight.t()`,
`layer.weight[:, :d]`), as code that computes with a layer's weights outside the layer's `forward` does
(`torch.mm(layer.weight.t(), x)`, `F.linear(x, layer.weight)`, `layer.forward(x)` called around its hooks).

Used by the per-module measurement, which counts such an operation as a call of the module that owns the weights, and by
keep_float32, which runs such uses of a kept module's weights in float32 as its forward runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of an operation's arguments: given directly, or in a list, tuple or dict (`torch.cat([w, b])`)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


def direct_owners(root: nn.Module, name_of_root: str = "") -> dict[str, nn.Module]:
    """The modules of `root` that hold parameters of their own, by qualified name (`name_of_root` for `root`)."""
    return {
        name or name_of_root: module
        for name, module in root.named_modules()
        if any(p is not None for p in module._parameters.values())
    }


def _storage(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor without storage of its own (a functional wrapper)
        return None


class ParameterUses:
    """The parameters of some modules, by owner, and the views of them made so far (kept while the view lives)."""

    def __init__(self, owners: dict[str, nn.Module]) -> None:
        self._by_id: dict[int, str] = {}
        self._parameters: list[nn.Parameter] = []  # held, so that an id stays the parameter's
        for name, module in owners.items():
            for parameter in module._parameters.values():
                if parameter is not None and id(parameter) not in self._by_id:
                    self._by_id[id(parameter)] = name
                    self._parameters.append(parameter)
        self._views: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def owner_of(self, tensor: torch.Tensor) -> str | None:
        owner = self._by_id.get(id(tensor))
        return owner if owner is not None else self._views.get(tensor)

    def owners(self, args: Iterable[Any], kwargs: dict[str, Any]) -> list[str]:
        """The owners of the parameters (and views of them) among an operation's arguments, first met first."""
        found: list[str] = []
        for tensor in tensors_in((args, kwargs)):
            owner = self.owner_of(tensor)
            if owner is not None and owner not in found:
                found.append(owner)
        return found

    def note_views(self, out: Any, args: Iterable[Any], kwargs: dict[str, Any]) -> bool:
        """Record the outputs of an operation that are views of an owned argument (they share its storage); whether
        there was one (such an operation moved the weights, it computed nothing)."""
        owned = {_storage(t): owner for t in tensors_in((args, kwargs)) if (owner := self.owner_of(t)) is not None}
        owned.pop(None, None)
        seen = False
        for tensor in tensors_in(out):
            owner = owned.get(_storage(tensor)) if owned else None
            if owner is not None:
                if id(tensor) not in self._by_id:
                    self._views[tensor] = owner
                seen = True
        return seen
