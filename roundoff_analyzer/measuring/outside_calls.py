"""Weights used outside their module's call: code that computes with a layer's weights itself
(`torch.mm(layer.weight.t(), x)`), or calls `layer.forward(x)` around the module's hooks, runs no hook. While the
watched model runs, each torch operation that uses a module's parameters (or a view of them) while that module's own
call is not running is handed to the observer as one call of that module, measured as its hooked calls are."""

from __future__ import annotations

from typing import Any, Protocol

from torch.overrides import TorchFunctionMode

from ..axes.parameter_uses import ParameterUses


class OutsideCallSink(Protocol):
    def watching(self) -> bool:
        """Whether an operation now is the run's (not one of the observer's own recomputations)."""
        ...

    def running(self, name: str) -> bool:
        """Whether the hooked call of the module named `name` is running now."""
        ...

    def before_outside_call(self, func, args: tuple, kwargs: dict) -> Any:
        """What to take of an operation's inputs before it runs."""
        ...

    def outside_call(self, owner: str, func, taken: Any, out: Any, owners: list[str]) -> None:
        """One operation that used `owner`'s parameters outside its call, with its output; `owners`: every module whose
        parameters it used (the operation is counted as `owner`'s call only)."""
        ...


class OutsideCalls(TorchFunctionMode):
    def __init__(self, uses: ParameterUses, sink: OutsideCallSink) -> None:
        super().__init__()
        self.uses = uses
        self.sink = sink

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        owners = self.uses.owners(args, kwargs)
        if not owners:
            return func(*args, **kwargs)
        owner = next((o for o in owners if not self.sink.running(o)), None) if self.sink.watching() else None
        taken = self.sink.before_outside_call(func, args, kwargs) if owner is not None else None
        out = func(*args, **kwargs)
        # A view moves the weights (its uses are the ones that compute); any other operation on them computes.
        if not self.uses.note_views(out, args, kwargs) and owner is not None:
            self.sink.outside_call(owner, func, taken, out, owners)
        return out
