"""Where a training's weights live and how each optimizer step is rounded into them.

`float32` weights are today's master weights: the optimizer's step is kept as float32 computes it. Weights in a low
format (bfloat16, float16, an eXmY format) are float32 tensors whose every value is a value of that format: the
initial weights are rounded into it, and after each optimizer step the update rule rounds `w + delta` back into it
(delta: the optimizer's float32 step). The forward runs on these values as they are, with no other copy, so the
training is numerically the one of weights stored in the format; `weight_bytes` counts the format's bytes.
The optimizer's state (Adam's moments, SGD's momentum) lives in float32, or, with `optimizer_state = "weights"`,
is rounded to nearest into the weights' format after every step.

Use it in your own loop as the training does:

    stored = StoredWeights(list(model.parameters()), "bfloat16", "kahan", seed=0)   # rounds the weights into bfloat16
    ...
    loss.backward()
    before = stored.before_step()
    optimizer.step()
    lost_fraction = stored.after_step(before, optimizer)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..axes.dtypes import DTYPES
from ..emulation import NumberFormat
from ..emulation.rounding import round_nearest
from .updates import UPDATES

MASTER = "float32"


def weight_format(weights: str) -> NumberFormat | None:
    """The format the weights are stored in; None for float32 master weights."""
    return None if weights == MASTER else DTYPES.get(weights).format


def bytes_per_value(weights: str) -> int:
    fmt = weight_format(weights)
    return 4 if fmt is None else math.ceil((1 + fmt.exponent_bits + fmt.mantissa_bits) / 8)


class StoredWeights:
    """A model's weights stored in a low-precision format, each optimizer step rounded into them by an update rule.

    Args:
        params: The model's parameters; they are rounded into the format at once.
        weights: `float32` (master weights: nothing is rounded), or a dtype name (`bfloat16`, `float16`, `eXmY`).
        update: The update rule: `nearest`, `stochastic`, `kahan` or `stochastic-kahan`.
        optimizer_state: `float32`, or `weights` to round the optimizer's state into the weights' format.
        seed: The seed of stochastic rounding.

    Example:
        ```python
        stored = StoredWeights(list(model.parameters()), "bfloat16", "kahan", seed=0)
        loss.backward()
        before = stored.before_step()
        optimizer.step()
        lost_fraction = stored.after_step(before, optimizer)
        ```
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        weights: str = MASTER,
        update: str = "nearest",
        optimizer_state: str = "float32",
        seed: int = 0,
    ) -> None:
        self.params, self.weights, self.optimizer_state = params, weights, optimizer_state
        self.format, self.rule = weight_format(weights), UPDATES.get(update)
        # The stochastic-rounding stream: its own generator on the weights' device, saved with the resume state.
        self.generator = torch.Generator(device=params[0].device if params else "cpu").manual_seed(seed)
        self.compensation = (
            [torch.zeros_like(p) for p in params] if self.format is not None and self.rule.compensated else None
        )
        if self.format is not None:
            with torch.no_grad():
                for p in params:
                    p.copy_(round_nearest(p.float(), self.format))

    def before_step(self) -> list[torch.Tensor]:
        """The stored values before the optimizer steps (nothing for float32 master weights,
        which keep its step as is)."""
        return [] if self.format is None else [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def after_step(self, before: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> float | None:
        """Round the optimizer's step into the stored weights; the fraction of weight entries whose update was nonzero
        but left the stored value unchanged. None for float32 master weights: their step is the optimizer's own float32
        sum, whose dropped updates cannot be told from a zero step without the optimizer's step in higher precision."""
        if self.format is None:
            return None
        lost, total = 0, 0
        for index, (p, old) in enumerate(zip(self.params, before)):
            delta = p - old
            compensation = None if self.compensation is None else self.compensation[index]
            p.copy_(self.rule.apply(old, delta, compensation, self.format, self.generator))
            lost += int(((delta != 0) & (p == old)).sum())
            total += p.numel()
        if self.optimizer_state == "weights":
            self._round_state(optimizer, self.format)
        return lost / total if total else 0.0

    @staticmethod
    def _round_state(optimizer: torch.optim.Optimizer, fmt: NumberFormat) -> None:
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value) and value.is_floating_point() and value.dim() > 0:
                    value.copy_(round_nearest(value.float(), fmt))

    def weight_bytes(self) -> int:
        return sum(p.numel() for p in self.params) * bytes_per_value(self.weights)

    def optimizer_state_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        """The optimizer's per-weight state (moments, momentum) in the format it lives in,
        plus the compensation buffers."""
        per_value = bytes_per_value(self.weights if self.optimizer_state == "weights" else MASTER)
        values = sum(
            v.numel()
            for state in optimizer.state.values()
            for v in state.values()
            if torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0
        )
        buffers = sum(c.numel() for c in self.compensation or ()) * bytes_per_value(self.weights)
        return values * per_value + buffers

    def state_dict(self) -> dict:
        return {
            "compensation": [c.detach().cpu().clone() for c in self.compensation]
            if self.compensation is not None
            else None,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.compensation is not None and state.get("compensation") is not None:
            for own, saved in zip(self.compensation, state["compensation"]):
                own.copy_(saved)
        if state.get("generator") is not None:
            self.generator.set_state(state["generator"])
