"""`grad` scaling finds the fewest backoffs by bisection, or from the retries of a similar run: the same
gradients, final scale, retries and per-step record as GradScaler's own loop (back off by one step after
each non-finite backward), in two backward passes where the hint is right or one short, the pass that counted
never run twice."""

from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import TrajectoryProblem, parse_options, resolve_model
from roundoff_analyzer.axes.modes import MODES, ProblemCopies
from roundoff_analyzer.axes.scalings import SCALINGS, BackwardResult, ScalerSettings
from roundoff_analyzer.axes.scalings.base import ScalingRegistry
from roundoff_analyzer.axes.scalings.grad import _Leaves, first_finite
from roundoff_analyzer.core.errors import ScalerExhausted
from roundoff_analyzer.measuring.one_run import RunOutcome, run_once
from roundoff_analyzer.measuring.run_spec import RunSpec


class GradScalerLoop:
    """The way a training loop meets the scale: one backward per backoff until the gradients are finite."""

    name = "grad"

    def adjoint_scaler(self, settings):
        return None

    def backward(self, loss, leaves, adjoint_scaler, settings, hint=None):
        scaler = torch.amp.GradScaler(
            "cpu", init_scale=settings.init_scale, backoff_factor=settings.backoff_factor, growth_interval=2**31 - 1
        )
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


def measure(copies, scaling, library, method, n, settings, hint=None) -> RunOutcome:
    prepared = MODES.get("autocast").prepare(copies, torch.float16)
    return run_once(RunSpec(prepared, copies, LIBRARIES.get(library), METHODS.get(method), n), scaling, settings, hint)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


class ReluField(torch.nn.Module):
    """A ReLU right-hand side: its backward masks gradient entries, so an overflow there may not show."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.outer = torch.nn.Linear(3, 16), torch.nn.Linear(16, 3)

    def forward(self, t, y):
        return self.outer(torch.relu(self.inner(y)))


@pytest.fixture(scope="module")
def relu_copies() -> ProblemCopies:
    torch.manual_seed(0)
    y0 = torch.randn(16, 3, generator=torch.Generator().manual_seed(1))
    problem = TrajectoryProblem(
        func=ReluField(), y0=y0, loss=lambda trajectory: 1e3 * trajectory[-1].pow(2).sum(), data_source="in the test"
    )
    return ProblemCopies(problem)


CASES = [
    ("native", "euler", 4, ScalerSettings()),
    ("native", "rk4", 8, ScalerSettings()),
    ("torchdiffeq", "euler", 8, ScalerSettings()),
    ("torchdiffeq", "rk4", 4, ScalerSettings()),
    ("native", "rk4", 4, ScalerSettings(backoff_factor=0.3)),  # a factor that is not a power of two: bisection
    ("native", "euler", 8, ScalerSettings(max_retries=4)),  # exhausted before the scale is small enough
    ("torchdiffeq", "euler", 4, ScalerSettings(init_scale=1.0)),  # no retry needed
    ("torchdiffeq", "euler", 16, ScalerSettings(init_scale=2.0**20)),
]


def same_outcome(fast: RunOutcome, loop: RunOutcome) -> bool:
    assert (fast.final_scale, fast.retries) == (loop.final_scale, loop.retries)
    assert (fast.failure is None) == (loop.failure is None)
    if loop.failure is None:
        assert all(same_bits(a, b) for a, b in zip(fast.grads, loop.grads))
    else:
        assert fast.failure.failure_class == loop.failure.failure_class == "scaler_exhausted"
    assert repr(fast.report.backward) == repr(loop.report.backward)  # repr: NaN equals NaN
    return True


@pytest.mark.parametrize("library, method, n, settings", CASES)
def test_the_search_gives_what_gradscalers_loop_gives(copies, library, method, n, settings):
    loop = measure(copies, GradScalerLoop(), library, method, n, settings)
    grad = SCALINGS.get("grad")
    assert same_outcome(measure(copies, grad, library, method, n, settings), loop)
    if (
        loop.retries is not None and loop.retries >= 5
    ):  # the search is only put to the test where the loop backed off often
        # From the right hint or one short, two passes (the pass that counted is not the last in the first case);
        # from hints off by more either way, the same result.
        for hint in (loop.retries, loop.retries - 1):
            hinted = measure(copies, grad, library, method, n, settings, hint=hint)
            assert same_outcome(hinted, loop) and hinted.backward_passes == 2, hint
        for hint in (loop.retries - 3, loop.retries + 1, settings.max_retries + 5):
            assert same_outcome(measure(copies, grad, library, method, n, settings, hint=hint), loop), hint


@pytest.mark.unit
@pytest.mark.parametrize("library", ["native", "torchdiffeq"])
def test_a_relu_field_gives_what_gradscalers_loop_gives(relu_copies, library):
    loop = measure(relu_copies, GradScalerLoop(), library, "euler", 8, ScalerSettings())
    assert loop.retries >= 5
    for hint in (None, loop.retries - 2, loop.retries + 2):
        assert same_outcome(
            measure(relu_copies, SCALINGS.get("grad"), library, "euler", 8, ScalerSettings(), hint=hint), loop
        )


@pytest.mark.unit
@pytest.mark.parametrize("answer", [0, 1, 5, 11, 29, 30, 31])
@pytest.mark.parametrize("guess", [0, 1, 5, 10, 11, 12, 31, 40])
def test_first_finite_from_a_guess_finds_the_boundary(answer, guess):
    calls = []

    def finite_at(k):
        calls.append(k)
        return k >= answer

    assert first_finite(finite_at, 31, guess) == answer
    assert answer == 31 or answer in calls  # the gradients of the answer were seen
    assert answer in (0, 31) or answer - 1 in calls  # and the next larger scale seen to overflow
    if guess == answer and 0 < answer < 31:
        assert calls == [answer, answer - 1]
    if guess == answer - 1:
        assert calls == [answer - 1, answer]
    assert len(calls) <= 8


@pytest.mark.unit
@pytest.mark.parametrize("answer", [0, 1, 5, 11, 29, 30, 31])
def test_first_finite_finds_the_boundary_with_few_probes(answer):
    probed = []

    def finite_at(k):
        probed.append(k)
        return k >= answer

    assert first_finite(finite_at, 31) == answer
    assert len(probed) <= 6 and (answer == 0 or answer - 1 in probed) and (answer == 31 or answer in probed)


def test_only_grad_searches_a_scale_and_a_scaling_that_does_not_say_is_read_as_one_that_does_not(copies):
    assert {scaling.name: scaling.searches_scale for scaling in SCALINGS} == {
        "dynamic": False,
        "grad": True,
        "none": False,
    }
    registry = ScalingRegistry("scaling")
    declared = SCALINGS.get("grad")
    assert registry.register(declared, "declared") is declared
    registry.register(GradScalerLoop())  # written against the protocol without subclassing it, no searches_scale
    plugin = registry.get("grad")
    assert plugin.searches_scale is False and plugin.name == "grad"
    # Everything but the default is the plug-in's own: a run with the registered scaling is a run with the plug-in.
    settings = ScalerSettings()
    through_registry = measure(copies, plugin, "native", "euler", 4, settings)
    assert same_outcome(through_registry, measure(copies, GradScalerLoop(), "native", "euler", 4, settings))
