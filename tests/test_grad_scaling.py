"""`grad` scaling finds the fewest backoffs by bisection: the same gradients, final scale, retries and
per-step record as GradScaler's own loop (back off by one step after each non-finite backward)."""
from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.errors import ScalerExhausted
from roundoff_analyzer.libraries import LIBRARIES
from roundoff_analyzer.measure import RunOutcome, run_once, time_grid
from roundoff_analyzer.methods import METHODS
from roundoff_analyzer.models import parse_options, resolve_model
from roundoff_analyzer.modes import MODES, ProblemCopies
from roundoff_analyzer.scalings import SCALINGS, BackwardResult, ScalerSettings
from roundoff_analyzer.scalings.grad import _Leaves, first_finite


class GradScalerLoop:
    """The way a training loop meets the scale: one backward per backoff until the gradients are finite."""

    name = "grad"

    def adjoint_scaler(self, settings):
        return None

    def backward(self, loss, leaves, adjoint_scaler, settings):
        scaler = torch.amp.GradScaler("cpu", init_scale=settings.init_scale, backoff_factor=settings.backoff_factor,
                                      growth_interval=2**31 - 1)  # fmt: skip
        for attempt in range(settings.max_retries + 1):
            for leaf in leaves:
                leaf.grad = None
            scale = scaler.get_scale()
            scaler.scale(loss).backward(retain_graph=True)
            scaler.unscale_(_Leaves(leaves))
            finite = all(leaf.grad is None or bool(torch.isfinite(leaf.grad).all()) for leaf in leaves)
            scaler.update()
            if finite:
                return BackwardResult([leaf.grad for leaf in leaves], final_scale=scale, retries=attempt)
        raise ScalerExhausted("exhausted", final_scale=scale, retries=settings.max_retries)


@pytest.fixture(scope="module")
def copies() -> ProblemCopies:
    model = resolve_model("otflow")
    return ProblemCopies(model.build(parse_options(model, {"d": 3, "hidden": 8, "batch": 16}), torch.device("cpu")))


def measure(copies, scaling, library, method, n, settings) -> RunOutcome:
    prepared = MODES.get("autocast").prepare(copies, torch.float16)
    t = time_grid(n, torch.float32, torch.device("cpu"))
    return run_once(prepared, copies, LIBRARIES.get(library), METHODS.get(method), scaling, settings, t, torch.float32)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


CASES = [
    ("native", "euler", 4, ScalerSettings()),
    ("native", "rk4", 8, ScalerSettings()),
    ("torchdiffeq", "euler", 8, ScalerSettings()),
    ("torchdiffeq", "rk4", 4, ScalerSettings()),
    ("native", "rk4", 4, ScalerSettings(backoff_factor=0.3)),  # a factor that is not a power of two
    ("native", "euler", 8, ScalerSettings(max_retries=4)),  # exhausted before the scale is small enough
    ("torchdiffeq", "euler", 4, ScalerSettings(init_scale=1.0)),  # no retry needed
]


@pytest.mark.parametrize("library, method, n, settings", CASES)
def test_bisection_gives_what_gradscalers_loop_gives(copies, library, method, n, settings):
    fast, loop = (measure(copies, scaling, library, method, n, settings) for scaling in (SCALINGS.get("grad"), GradScalerLoop()))
    assert (fast.final_scale, fast.retries) == (loop.final_scale, loop.retries)
    assert (fast.failure is None) == (loop.failure is None)
    if loop.failure is None:
        assert all(same_bits(a, b) for a, b in zip(fast.grads, loop.grads))
    else:
        assert fast.failure.failure_class == loop.failure.failure_class == "scaler_exhausted"
    assert repr(fast.report.backward) == repr(loop.report.backward)  # repr: NaN equals NaN
    if settings == ScalerSettings():  # bisection is only put to the test where the loop needed several backoffs
        assert loop.retries >= 5


@pytest.mark.parametrize("answer", [0, 1, 5, 11, 29, 30, 31])
def test_first_finite_finds_the_boundary_with_few_probes(answer):
    probed = []

    def finite_at(k):
        probed.append(k)
        return k >= answer

    assert first_finite(finite_at, 31) == answer
    assert len(probed) <= 6 and (answer == 0 or answer - 1 in probed) and (answer == 31 or answer in probed)
