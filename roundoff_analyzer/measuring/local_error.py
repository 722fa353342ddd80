"""The roundoff one call adds, not the one it inherits: forward, the callable re-run in float64 on the very inputs the
run gave it; backward, its vector-Jacobian product with the very gradients that reached its outputs, recomputed in the
run's precision and in float64. A callable is a module (with a float64 copy of it) or one torch operation (the same
operation on float64 inputs). A call's outputs are every floating tensor it returns, in a tuple, list or dict too (a
GRU's `(output, h_n)`, an LSTM's `(output, (h, c))`): the error is over all of them together.

Each recomputation hands the callable what the run handed it: an input that did not require grad in the run does not
here either (a time `t` handed on as a Python float, `pad(x, value=t)`, takes no tensor that requires grad)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field

import torch

from ..axes.parameter_uses import tensors_in
from ..emulation.mode import active_emulation
from . import metrics
from .call_inputs import SavedInputs, map_tensors, to_float64


def autocast_devices() -> tuple[str, ...]:
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def in_low_precision() -> bool:
    """Whether the calling code computes in the run's low precision (its autocast or emulation is on)."""
    return active_emulation() is not None or any(torch.is_autocast_enabled(d) for d in autocast_devices())


@contextmanager
def plain_precision() -> Iterator[None]:
    """No autocast and no emulation (a TorchFunctionMode): a float64 re-run is plain float64 arithmetic."""
    with ExitStack() as stack:
        for device in autocast_devices():
            stack.enter_context(torch.autocast(device, enabled=False))
        if active_emulation() is not None:
            stack.enter_context(torch._C.DisableTorchFunction())
        yield


def floating_outputs(value) -> list[torch.Tensor]:
    """Every floating tensor of an output, in order: a tensor, or those a tuple, list or dict holds, nested."""
    return [t for t in tensors_in(value) if t.is_floating_point()]


class NotMeasured(Exception):
    """A recomputation that could not stand for the run's call; its message says why, in words."""


@dataclass(frozen=True)
class Recomputed:
    """What a call's local error is recomputed with: the callable as the run ran it, its float64 twin, and the
    parameters the backward differentiates (by name: the run's and the twin's)."""

    low: Callable
    float64: Callable
    parameters: dict[str, torch.Tensor] = field(default_factory=dict)
    parameters64: dict[str, torch.Tensor] = field(default_factory=dict)


def _matched(run: list[torch.Tensor], again: list[torch.Tensor], what: str) -> None:
    """A recomputation stands for the call only where it gives the call's outputs, one for one, of the same shapes."""
    if len(again) != len(run):
        raise NotMeasured(f"the {what} gave {len(again)} floating outputs, the run {len(run)}")
    for index, (mine, theirs) in enumerate(zip(run, again)):
        if mine.shape != theirs.shape:
            which = f" (output {index})" if len(run) > 1 else ""
            raise NotMeasured(f"the {what} gave shape {tuple(theirs.shape)}, the run {tuple(mine.shape)}{which}")


def forward_error(
    recomputed: Recomputed, inputs64: tuple[tuple, dict], outs: list[torch.Tensor], in_place: bool
) -> float:
    """The run's outputs against the callable re-run in float64 on the inputs the run gave it."""
    args, kwargs = map_tensors(inputs64, torch.Tensor.clone) if in_place else inputs64
    with torch.no_grad(), plain_precision():
        references = floating_outputs(recomputed.float64(*args, **kwargs))
    _matched(outs, references, "float64 re-run")
    run, reference = metrics.joined(outs), metrics.joined(references)
    assert run is not None and reference is not None  # a call without a floating output is not measured
    return metrics.rel_err(run, reference)


def backward_error(
    recomputed: Recomputed,
    saved: SavedInputs,
    grads: dict[int, torch.Tensor],
    context: Callable[[], AbstractContextManager] | None,
    in_place: bool,
) -> tuple[float | None, bool]:
    """The vector-Jacobian product with `grads` (by the position of the output they reached among the call's floating
    outputs) at the call's inputs (those that required grad in the run) and the parameters, recomputed in the run's
    precision (`context`; None: the call ran without it) against float64; and whether the recomputed one was
    non-finite. (None, False) where nothing the run differentiated went in."""
    flags = saved.requires_grad
    positional = len(saved.args)
    names = list(saved.kwargs)
    wanted = [i for i, on in enumerate(flags) if on]
    if not wanted and not recomputed.parameters:
        return None, False

    def leaves(given: tuple, given_kwargs: dict) -> tuple[list, dict, list[torch.Tensor]]:
        args, kwargs = list(given), dict(given_kwargs)
        made = []
        for i in wanted:
            leaf = (args[i] if i < positional else kwargs[names[i - positional]]).detach().requires_grad_(True)
            made.append(leaf)
            # A callable that writes into its input gets a non-leaf: autograd refuses in-place writes into a leaf.
            handed = leaf.clone() if in_place else leaf
            if i < positional:
                args[i] = handed
            else:
                kwargs[names[i - positional]] = handed
        return args, kwargs, made

    with torch.enable_grad():  # (a gradient hook runs with grad mode off)
        low_args, low_kwargs, low_leaves = leaves(*map_tensors((saved.args, saved.kwargs), torch.Tensor.clone))
        high_args, high_kwargs, high_leaves = leaves(*to_float64((saved.args, saved.kwargs)))
        with context() if context is not None else plain_precision():
            outs_low = floating_outputs(recomputed.low(*low_args, **low_kwargs))
        with plain_precision():
            outs_high = floating_outputs(recomputed.float64(*high_args, **high_kwargs))
        if not outs_low or not outs_high:
            raise NotMeasured("the recomputation gave no floating tensor")
        if max(grads) >= min(len(outs_low), len(outs_high)):
            raise NotMeasured(f"the recomputation gave {len(outs_low)} floating outputs, the run more")
        reached = [i for i in grads if outs_low[i].requires_grad and outs_high[i].requires_grad]
        if not reached:
            return None, False
        wrt_low = low_leaves + list(recomputed.parameters.values())
        wrt_high = high_leaves + [recomputed.parameters64[n] for n in recomputed.parameters]
        cotangents_low = [grads[i].to(outs_low[i].dtype) for i in reached]
        cotangents_high = [grads[i].double() for i in reached]
        grads_low = torch.autograd.grad([outs_low[i] for i in reached], wrt_low, cotangents_low, allow_unused=True)
        grads_high = torch.autograd.grad([outs_high[i] for i in reached], wrt_high, cotangents_high, allow_unused=True)
    pairs = [(g, h) for g, h in zip(grads_low, grads_high) if g is not None and h is not None]
    if not pairs:
        return None, False
    if not metrics.all_finite([g for g, _ in pairs]):
        return None, True
    return metrics.rel_err(metrics.flatten([g for g, _ in pairs]), metrics.flatten([h for _, h in pairs])), False
