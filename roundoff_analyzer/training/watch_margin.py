"""The largest magnitude a watched run held in its low precision, for the watch's overflow margin. Read: the result of
every torch function the run called (the model's layers and the functions inside them, the solver's arithmetic, the
loss, the backward of a solver's own autograd Function), every value such a call cast into the low dtype from another
floating dtype (autocast's casts of a layer's input, weight and bias), every gradient the backward passed out of or
into a node of the autograd graph, in the low dtype; and the native solver's adjoint as the low dtype held it.

Read through a torch function mode and hooks on the graph's nodes: Python runs once per function called and once per
node, not at each operation they dispatch (a dispatch mode, which did, cost a third of OT-Flow's measurement), and the
values are read in bunches. Not read: the temporaries inside one call (the operations one function dispatches: a
composite function's parts, a TorchScript function's body; one node's backward formula) and the partial sums of a
gradient that three or more uses accumulate. An overflow inside one shows in the call's result or the sum (inf, or NaN,
both read as inf) unless that one call saturates it (a tanh of an inf within one composite function); a finite
temporary larger than the values around it goes unread. tests/test_watch.py checks the reading equals every
operation's on the watch's models. Not read either: memory a function returns as it found it (`empty`, `new_empty`),
whose bits are not the run's until it writes them.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction
from torch.overrides import TorchFunctionMode

# Read in bunches: one operation over this many kept values (or this many bytes of them), not one each.
BUNCH = 512
BUNCH_BYTES = 64 * 2**20


class LargestMagnitude(TorchFunctionMode):
    """Within it, a run's low-dtype values are read as it computes them; `value(adjoint)` is their largest magnitude
    (inf where one was inf or NaN: an overflow). Leaving it removes every hook it set."""

    def __init__(self, low: torch.dtype) -> None:
        super().__init__()
        self.low = low
        self.kept: list[torch.Tensor] = []
        self.kept_ids: set[int] = set()
        self.kept_bytes = 0
        # Values another dtype held that a function cast into the low dtype, by that dtype.
        self.cast: dict[torch.dtype, list[torch.Tensor]] = {}
        self.n_cast = 0
        self.largest: list[torch.Tensor] = []
        self.hooked: set[Any] = set()
        self.handles: list[Any] = []
        self.reentered = 0  # times it was entered again for an autograd Function's backward, not left yet
        self.closed = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.closed:  # entered again by a backward that then failed, on another thread: inert
            return func(*args, **kwargs)
        if "out" in kwargs or _writes_in_place(func):
            self._read_kept()  # the values it overwrites, before it does
        result = func(*args, **kwargs)
        if _uninitialised(func):
            return result  # its memory as it was found (a solver fills it later): nothing the run computed
        results = [result] if isinstance(result, torch.Tensor) else result if isinstance(result, tuple | list) else ()
        low = False
        for item in results:
            if isinstance(item, torch.Tensor):
                low = low or item.dtype == self.low
                self._forward(item)
        if low:
            self._read_casts(args)
        return result

    def __exit__(self, exc_type, exc_value, traceback):
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.hooked.clear()
        while self.reentered:  # a backward that raised before its hook could leave
            self._leave()
        self.closed = True
        return super().__exit__(exc_type, exc_value, traceback)

    def _read_casts(self, args: tuple[Any, ...]) -> None:
        """A function that returned the low dtype from arguments in another floating dtype cast them into it (autocast
        casts a layer's input, weight and bias): the arguments as the low dtype held them."""
        for arg in args:
            for tensor in arg if isinstance(arg, tuple | list) else (arg,):
                if (
                    isinstance(tensor, torch.Tensor)
                    and tensor.dtype != self.low
                    and tensor.is_floating_point()
                    and tensor.numel()
                ):
                    self.cast.setdefault(tensor.dtype, []).append(tensor.detach())
                    self.n_cast += 1
                    self.kept_bytes += tensor.numel() * tensor.element_size()
        if self.n_cast >= BUNCH or self.kept_bytes >= BUNCH_BYTES:
            self._read_kept()

    def _forward(self, tensor: torch.Tensor) -> None:
        if tensor.dtype == self.low:
            self._keep(tensor.detach())
        if tensor.grad_fn is not None and tensor.grad_fn not in self.hooked:
            self._hook_graph(tensor.grad_fn)

    def _hook_graph(self, node: Any) -> None:
        """Hooks `node` and the nodes behind it not hooked yet: those of functions called outside the mode (an
        autograd Function's `apply`, the operations a composite one dispatches, autocast's casts)."""
        waiting = [node]
        while waiting:
            node = waiting.pop()
            if node is None or node in self.hooked:
                continue
            self.hooked.add(node)
            self.handles.append(node.register_hook(self._backward))
            if isinstance(node, BackwardCFunction):  # a Function's backward in Python: its functions read too
                self.handles.append(node.register_prehook(self._enter))
                self.handles.append(node.register_hook(self._left))
            waiting.extend(before for before, _ in node.next_functions)

    def _enter(self, grad_outputs: tuple[Any, ...]) -> None:
        self.__enter__()
        self.reentered += 1

    def _left(self, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        if self.reentered:
            self._leave()

    def _leave(self) -> None:
        self.reentered -= 1
        super().__exit__(None, None, None)

    def _backward(self, grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        for gradient in (*grad_inputs, *grad_outputs):
            if gradient is not None and gradient.dtype == self.low:
                self._keep(gradient)

    def _keep(self, tensor: torch.Tensor) -> None:
        # A gradient one node passes out is the next node's gradient in, the same tensor: read once. (A kept tensor
        # stays alive until read, so its id is no other tensor's.)
        if tensor.numel() and id(tensor) not in self.kept_ids:
            self.kept.append(tensor)
            self.kept_ids.add(id(tensor))
            self.kept_bytes += tensor.numel() * tensor.element_size()
            if len(self.kept) >= BUNCH or self.kept_bytes >= BUNCH_BYTES:
                self._read_kept()

    def _read_kept(self) -> None:
        # Each bunch's largest kept as a tensor: a float() here would wait for a GPU.
        with torch.no_grad():
            for tensors in self.cast.values():
                # Their largest cast as the cast rounds it (above the low dtype's largest finite, inf); a norm, which
                # copies nothing: the values may be a large layer's weight.
                self.largest.append(torch.stack(torch._foreach_norm(tensors, math.inf)).amax().to(self.low))
            if self.kept:
                # abs copies at most a bunch's bytes, and in float16 reads faster than the norm.
                self.largest.append(torch.stack(torch._foreach_max(torch._foreach_abs(self.kept))).amax())
        self.cast, self.n_cast, self.kept, self.kept_bytes = {}, 0, [], 0
        self.kept_ids.clear()

    def value(self, adjoint: float | None) -> float:
        """The largest magnitude read (inf for an inf or NaN), the native solver's `adjoint` record included."""
        self._read_kept()
        found = float(torch.stack(self.largest).amax()) if self.largest else 0.0
        if adjoint is not None:
            found = max(found, adjoint)
        return found if math.isfinite(found) else math.inf


# Functions returning memory as it was found, which may hold any bits (an inf, a NaN, a huge finite value) until the
# run writes into it: torchode's solver allocates its stages with `new_empty`.
_UNINITIALISED = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})


def _uninitialised(func: Any) -> bool:
    return getattr(func, "__name__", "") in _UNINITIALISED


def _writes_in_place(func: Any) -> bool:
    """Whether a torch function writes into a tensor it was given (`x.add_(y)`, `x += y`, `x[i] = y`); `out=` apart."""
    try:
        return _in_place_by_name(func)
    except TypeError:  # a callable that cannot be a key
        return _in_place_by_name.__wrapped__(func)


@functools.cache
def _in_place_by_name(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    trailing = name.endswith("_") and not name.endswith("__")
    return trailing or name.startswith("__i") or name == "__setitem__"
