"""The `grad` scaling: torch.amp.GradScaler's loss scaling, found in as few backward passes as possible."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import cast

import torch

from ...core.errors import ScalerExhausted
from ...solvers import DynamicAdjointScaler
from ...solvers.overflow_stop import BackwardOverflow, stopping_at_overflow
from ..libraries import SolverLibrary
from ..scaler_settings import ScalerSettings
from .base import SCALINGS, BackwardResult, Scaling, ScalingCode


class _Leaves:
    """What GradScaler.unscale_ reads of an optimizer: its parameter groups. (A real optimizer would
    do as well, but constructing one imports torch._dynamo, over a second per process.)"""

    def __init__(self, leaves: Sequence[torch.Tensor]) -> None:
        self.param_groups = [{"params": list(leaves)}]


def backoff_scales(init_scale: float, backoff_factor: float, max_retries: int, device: torch.device) -> list[float]:
    """The scale GradScaler holds after k backoffs, k = 0 … max_retries, computed by the op its update()
    runs after a non-finite step (so the float32 rounding is the same as a GradScaler's, on this device)."""
    scale = torch.full((1,), init_scale, dtype=torch.float32, device=device)
    growth_tracker = torch.zeros(1, dtype=torch.int32, device=device)
    found_inf = torch.ones(1, dtype=torch.float32, device=device)
    scales = []
    for _ in range(max_retries + 1):
        scales.append(scale.item())
        torch._amp_update_scale_(scale, growth_tracker, found_inf, 2.0, backoff_factor, 2**31 - 1)
    return scales


def first_finite(finite_at: Callable[[int], bool], n: int, guess: int | None = None) -> int:
    """The smallest k in [0, n) with finite_at(k), or n when none. Without a guess: k = 0 first (the common case with
    no retry), then bisection (about log2(n) calls instead of k + 1). With one: the guess, then its neighbour on the
    side the answer lies, so two calls when the answer is the guess or the next k, then bisection. It relies on
    finiteness being monotone in k (a smaller scale never overflows where a larger did not) and checks it where it
    matters: the answer was seen finite and k - 1 non-finite, or k = 0. A wrong guess costs calls, never the answer."""
    non_finite, finite = -1, n  # the largest k seen non-finite (-1: none) and the smallest seen finite (n: none)

    def probe(k: int) -> None:
        nonlocal non_finite, finite
        if finite_at(k):
            finite = k
        else:
            non_finite = k

    start = 0 if guess is None else min(max(guess, 0), n - 1)
    probe(start)
    if guess is not None and finite - non_finite > 1:
        neighbour = start - 1 if finite == start else start + 1
        if 0 <= neighbour < n:
            probe(neighbour)
    while finite - non_finite > 1:
        probe((non_finite + finite) // 2)
    return finite


class GradScaling(Scaling):
    name = "grad"
    searches_scale = True  # its backward searches a loss scale; a hint of where to start saves passes
    shares_forward = True  # its passes keep the graph whatever `keep_graph` says: the search runs several
    description = (
        "loss scaling with torch.amp.GradScaler: scale, backward, unscale; back off and retry on a non-finite gradient"
    )
    words = "`grad` loss scaling"
    code = ScalingCode(
        before_loop=('scaler = torch.amp.GradScaler("{device}")  # once, before the training loop',),
        backward="scaler.scale(loss).backward()",
        optimizer_step=(
            "scaler.unscale_(optimizer)  # the true gradients, before any clip",
            "{clip}: after unscale_",
            "scaler.step(optimizer)",
            "scaler.update()",
        ),
        pure_note=("# the gradients are scaler.get_scale() times the true ones: divide them by it before use",),
    )
    glossary = (
        "loss scaling with `torch.amp.GradScaler`: the loss is multiplied by a large scale before the "
        "backward pass, so that small gradients do not underflow, and the scale is backed off after a "
        "non-finite gradient."
    )

    def skip_reason(self, library: SolverLibrary) -> str | None:
        return None

    def adjoint_scaler(self, settings: ScalerSettings) -> DynamicAdjointScaler | None:
        return None

    def backward(
        self,
        loss: torch.Tensor,
        leaves: Sequence[torch.Tensor],
        adjoint_scaler: DynamicAdjointScaler | None,
        settings: ScalerSettings,
        hint: int | None = None,
        keep_graph: bool = False,
    ) -> BackwardResult:
        # The result is GradScaler's after k backoffs, k the fewest that give finite gradients, and `retries`
        # is k. k is found from `hint` (the k of a similar run: two backward passes when it is k or k - 1) or by
        # bisection (about log2(max_retries) passes instead of k + 1). The gradients of the smallest finite k seen
        # are kept, so the pass that counted is never run again.
        scales = backoff_scales(settings.init_scale, settings.backoff_factor, settings.max_retries, loss.device)
        # unscale_ reads only `param_groups`, which _Leaves has; its annotation asks for a whole Optimizer.
        optimizer = cast(torch.optim.Optimizer, _Leaves(leaves))
        passes = 0
        # The smallest finite k seen (each finite probe of the search is smaller) -> (its pass, its gradients).
        kept: dict[int, tuple[int, list[torch.Tensor | None]]] = {}

        last_probe = 0

        def finite_at(k: int, stop_at_overflow: bool = True) -> bool:
            nonlocal passes, last_probe
            # The real GradScaler, so that its own checks (e.g. its refusal of float16 gradients) apply.
            # Growth is switched off: one measurement is one step, never long enough to grow.
            scaler = torch.amp.GradScaler(loss.device.type, init_scale=scales[k], growth_interval=2**31 - 1)
            for leaf in leaves:
                leaf.grad = None
            passes, last_probe = passes + 1, k
            try:
                # A probe that overflows is never the pass that counts: it may end at its first non-finite step.
                with stopping_at_overflow() if stop_at_overflow else nullcontext():
                    scaler.scale(loss).backward(retain_graph=True)
            except BackwardOverflow:
                return False
            scaler.unscale_(optimizer)
            finite = all(leaf.grad is None or bool(torch.isfinite(leaf.grad).all()) for leaf in leaves)
            if finite:  # a later pass sets the leaves' gradients again: these are kept aside, untouched
                kept.clear()
                kept[k] = (passes - 1, [leaf.grad for leaf in leaves])
            return finite

        k = first_finite(finite_at, len(scales), hint)
        if k == len(scales):
            # Exhausted: the last pass is the one that counted, and its record is read whole.
            finite_at(last_probe, stop_at_overflow=False)
            raise ScalerExhausted(
                f"loss scale still gives non-finite gradients after {settings.max_retries} retries "
                f"(scale {scales[-1]:g})",
                final_scale=scales[-1],
                retries=settings.max_retries,
            )
        counted_pass, grads = kept[k]
        return BackwardResult(grads, final_scale=scales[k], retries=k, passes=passes, counted_pass=counted_pass)


SCALINGS.register(GradScaling())
