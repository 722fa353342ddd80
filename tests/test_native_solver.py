"""The native solver: exact gradients of its own discretisation, convergence, and adjoint scaling."""

from __future__ import annotations

import pytest
import torch

from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import MODELS, parse_options
from roundoff_analyzer.solvers import DynamicAdjointScaler, SolveReport, increment, odeint

pytestmark = pytest.mark.unit


def _problem(name: str, **options):
    model = MODELS.get(name)
    problem = model.build(parse_options(model, options), torch.device("cpu"))
    problem.func.double()
    return problem


def _autograd_through_steps(func, y0, t, method):
    y, states = y0, [y0]
    for k in range(t.numel() - 1):
        y = y + increment(func, METHODS.get(method), t[k], y, t[k + 1] - t[k])
        states.append(y)
    return torch.stack(states)


@pytest.mark.parametrize("method", ["euler", "rk4"])
@pytest.mark.parametrize(
    "model, options", [("otflow", {"d": 3, "hidden": 8, "batch": 5, "n_layers": 3}), ("linear", {})]
)
def test_float64_gradients_equal_autograd_through_the_same_discretisation(model, options, method):
    problem = _problem(model, **options)
    params = list(problem.func.parameters())
    t = torch.linspace(0, 1, 7, dtype=torch.float64)

    y0 = problem.y0.double().requires_grad_(True)
    native = odeint(problem.func, y0, t, method=METHODS.get(method))  # the sweep's rule (the drop-in's rk4 is 3/8)
    native_grads = torch.autograd.grad(problem.loss(native), [y0, *params], allow_unused=True)

    y0_ref = problem.y0.double().requires_grad_(True)
    unrolled = _autograd_through_steps(problem.func, y0_ref, t, method)
    reference_grads = torch.autograd.grad(problem.loss(unrolled), [y0_ref, *params], allow_unused=True)

    assert torch.equal(native.detach(), unrolled.detach())
    for got, want in zip(native_grads, reference_grads):
        want = torch.zeros_like(got) if want is None else want  # c's bias does not reach the dynamics
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max())), (got - want).abs().max()


@pytest.mark.parametrize("method, order", [("euler", 1), ("rk4", 4)])
def test_converges_to_the_closed_form_solution_at_the_method_order(method, order):
    problem = _problem("linear", d=3, batch=2)
    errors = []
    for n in (16, 32):
        t = torch.linspace(0, 1, n + 1, dtype=torch.float64)
        with torch.no_grad():
            trajectory = odeint(problem.func, problem.y0.double(), t, method=METHODS.get(method))
        errors.append(float((trajectory[-1] - problem.exact_solution(t)[-1]).norm()))
    observed_order = torch.log2(torch.tensor(errors[0] / errors[1])).item()
    assert abs(observed_order - order) < 0.3, errors


def test_stored_states_are_low_precision_and_state_update_stays_float32():
    problem = _problem("linear", d=3, batch=2)
    problem.func.float()
    t = torch.linspace(0, 1, 5)
    y0 = problem.y0.float().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        trajectory = odeint(problem.func, y0, t, method="euler", checkpoint="states")  # the low-memory path's
    assert trajectory.dtype == torch.float32
    stored = trajectory.grad_fn.saved_tensors[1]
    assert stored.dtype == torch.bfloat16 and stored.shape == (5, *y0.shape)


def test_dynamic_scaler_rescues_an_adjoint_that_underflows_float16():
    problem = _problem("linear", d=4, batch=8)
    problem.func.float()
    t = torch.linspace(0, 1, 9)
    tiny = 1e-12  # the loss gradient lies far below float16's smallest subnormal (6e-8)

    def final_state_loss(trajectory):
        return tiny * trajectory[-1].pow(2).sum()

    def weight_grad(scaler):
        problem.func.zero_grad()
        y0 = problem.y0.float().requires_grad_(True)
        report = SolveReport()
        with torch.autocast("cpu", dtype=torch.float16):
            trajectory = odeint(problem.func, y0, t, method="rk4_classical", scaler=scaler, report=report)
        final_state_loss(trajectory.float()).backward()
        return problem.func.linear.weight.grad.clone(), report

    problem_64 = _problem("linear", d=4, batch=8)
    final_state_loss(odeint(problem_64.func, problem_64.y0.double(), t.double(), method="rk4_classical")).backward()
    reference = problem_64.func.linear.weight.grad

    unscaled, unscaled_report = weight_grad(None)
    scaler = DynamicAdjointScaler()
    scaled, scaled_report = weight_grad(scaler)
    unit_roundoff = 2.0**-11
    # Parameter gradients arrive only through low-precision products, so they collapse entirely.
    assert float(unscaled.norm()) < 0.1 * float(reference.norm())
    assert unscaled_report.backward[0].low_adjoint_zero_share > 0.5
    relative = float((scaled.double() - reference).norm() / reference.norm())
    assert relative < 10 * unit_roundoff, relative
    assert scaler.scale > 2**20  # the scale had to grow far above 1 to lift the adjoint
    assert scaled_report.backward[0].low_adjoint_zero_share == 0.0


def test_dynamic_scaler_halves_on_overflow_and_gives_up_past_its_bound():
    from roundoff_analyzer.core.errors import ScalerExhausted

    scaler = DynamicAdjointScaler(max_retries=2)
    first = scaler.scale_for(torch.full((4, 3), 8.0), torch.float16)
    assert first == 2.0 ** int(torch.log2(torch.tensor(1 / (2**-10 * 3**0.5) / 8)).floor())
    assert scaler.backoff() == first / 2 and scaler.backoff() == first / 4
    with pytest.raises(ScalerExhausted):
        scaler.backoff()
    assert scaler.retries == 2


def test_low_trajectory_returns_the_stored_states_and_gradients_flow_through_them():
    problem = _problem("linear", d=3, batch=2)
    problem.func.float()
    t = torch.linspace(0, 1, 5)
    outputs = {}
    for choice in ("state", "low"):
        y0 = problem.y0.float().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            trajectory = odeint(problem.func, y0, t, method="rk4_classical", trajectory_dtype=choice)
        shares_storage = trajectory.grad_fn.saved_tensors[1].data_ptr() == trajectory.data_ptr()
        assert shares_storage == (choice == "low")  # "low" keeps no second copy
        (grad_y0,) = torch.autograd.grad(trajectory.float().pow(2).sum(), [y0])
        outputs[choice] = trajectory, grad_y0
    state, low = outputs["state"][0], outputs["low"][0]
    assert state.dtype == torch.float32 and low.dtype == torch.bfloat16
    # The low trajectory is exactly the stored states: the state's trajectory rounded to bfloat16.
    assert torch.equal(low, state.to(torch.bfloat16))
    # The loss differs only by the rounding of the states, and so does the gradient.
    assert torch.allclose(outputs["low"][1], outputs["state"][1], rtol=2**-6, atol=2**-6)
    with pytest.raises(ValueError, match="trajectory_dtype"):
        odeint(problem.func, problem.y0.float(), t, method="rk4_classical", trajectory_dtype="float8")


def test_unscale_and_check_divides_exactly_and_finds_non_finite_entries():
    from roundoff_analyzer.solvers.unscale import unscale_and_check

    parts = [torch.tensor([3.0, -5e-39]), torch.tensor([7.0], dtype=torch.float64)]
    expected = [p / 2.0**20 for p in parts]
    assert unscale_and_check(parts, 2.0**20)
    assert all(torch.equal(p, e) for p, e in zip(parts, expected))
    assert not unscale_and_check([torch.tensor([1.0, float("nan")])], None)
    # A scale below 1 can push a finite entry past float32's largest: that counts as non-finite.
    assert not unscale_and_check([torch.tensor([3e38])], 0.5)
    # Beyond float32's exponent range the inverse is not exact in float32; the division still is.
    huge = [torch.tensor([1.0], dtype=torch.float64)]
    assert unscale_and_check(huge, 2.0**200) and huge[0].item() == 2.0**-200


class _TimeMLP(torch.nn.Module):
    """The ODE of bench/native_cost.py, smaller: widths 65 -> h -> h -> 64, tanh, t as the 65th input."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(65, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 64),
        )

    def forward(self, t, y):
        return self.net(torch.cat([y, t.to(y.dtype).expand(y.shape[0], 1)], dim=1))


@pytest.mark.parametrize("low_dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_low_trajectory_saves_the_float32_copy_and_the_low_gradient_of_the_trajectory(low_dtype):
    # What "low" is designed to save, computed from the tensors each choice keeps: the state-dtype copy
    # of the trajectory beside the stored states, and the gradient with respect to the trajectory, which
    # arrives in the low dtype rather than the state's. The peak of forward + backward falls by at least
    # the copy and by at most both; everything else (the steps' graphs, the weights' casts, the parameter
    # gradients) is the same in both runs, whatever the CPU's kernels allocate. What share of the float32
    # run's peak that leaves depends on the CPU: bench/native_cost.py measures it.
    from roundoff_analyzer.measuring.cpu_memory import cpu_peak_memory

    torch.manual_seed(0)
    func, y0, t = _TimeMLP(64), torch.randn(64, 64), torch.linspace(0, 1, 9)
    peaks, kept, trajectories = {}, {}, {}
    for trajectory_dtype in ("state", "low"):
        with cpu_peak_memory() as peak:
            y = y0.clone().requires_grad_(True)
            with torch.autocast("cpu", dtype=low_dtype):
                trajectory = odeint(  # the low-memory path's trade: with stored stages the states are their leaves
                    func, y, t, method="rk4_classical", trajectory_dtype=trajectory_dtype, checkpoint="states"
                )
            storages = {
                x.untyped_storage().data_ptr(): x.untyped_storage().nbytes()
                for x in (trajectory, *trajectory.grad_fn.saved_tensors)
            }
            trajectory[-1].float().pow(2).mean().backward()
        func.zero_grad(set_to_none=True)
        peaks[trajectory_dtype], kept[trajectory_dtype] = peak.bytes, sum(storages.values())
        trajectories[trajectory_dtype] = (trajectory.numel(), trajectory.dtype)
        del trajectory, y
    (n_elements, state_dtype), (_, returned_low) = trajectories["state"], trajectories["low"]
    assert state_dtype == torch.float32 and returned_low == low_dtype
    copy = kept["state"] - kept["low"]
    assert copy == n_elements * state_dtype.itemsize  # the one tensor "low" does not keep
    gradient = n_elements * (state_dtype.itemsize - low_dtype.itemsize)
    saved = peaks["state"] - peaks["low"]
    assert copy <= saved <= copy + gradient, (saved, copy, gradient, peaks)


class _TimeRecorder(torch.nn.Module):
    """dy/dt = w y; records every time it is evaluated at, forward and in the backward's rebuilt steps."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(-0.5))
        self.times: list[torch.Tensor] = []

    def forward(self, t, y):
        self.times.append(t.detach().clone())
        return self.w * y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("method", ["rk4_38", "heun3", "midpoint", "rk4_classical"])
@pytest.mark.parametrize("perturb", [False, True])
def test_stage_times_are_each_step_start_plus_c_h_as_a_python_float_in_the_forward_and_the_backward(
    dtype, method, perturb
):
    # Computed once per solve for all steps, the stage times must be the bits of the stage's own expression
    # t_k + c * h_k (h_k a Python float), nudged by one float where perturb asks, in both passes.
    steps = torch.rand(64, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    t = (0.3 - torch.cat([torch.zeros(1, dtype=torch.float64), steps.cumsum(0) / steps.sum()]) * 1.7).to(dtype)
    tableau = METHODS.get(method)
    want = []
    for start, end in zip(t[:-1], t[1:]):
        h = float(end - start)
        for i, c in enumerate(tableau.c):
            time = start + c * h
            if perturb and (i == 0 or (c == 1.0 and i == len(tableau.c) - 1)):
                toward = 1.0 if h > 0 else -1.0
                time = torch.nextafter(time, time + (toward if i == 0 else -toward))
            want.append(time)
    func = _TimeRecorder()
    y0 = torch.randn(4, 2, generator=torch.Generator().manual_seed(4), requires_grad=True)
    trajectory = odeint(  # the backward that evaluates again: the low-memory path's
        func, y0, t, method=method, options={"perturb": perturb}, params=list(func.parameters()), checkpoint="states"
    )
    forward = list(func.times)
    func.times.clear()
    trajectory[-1].sum().backward()
    backward = [
        time for k in reversed(range(len(t) - 1)) for time in want[k * len(tableau.c) : (k + 1) * len(tableau.c)]
    ]
    assert torch.equal(torch.stack(forward), torch.stack(want))
    assert torch.equal(torch.stack(func.times), torch.stack(backward))


def _mlp_gradients(dtype, checkpoint, memory_budget=None, scaler=False):
    """(the gradients of y0 and every parameter as one vector, the report) of a small MLP field's solve."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    net = net.to(wide)
    y0 = torch.randn(16, 4).to(wide).requires_grad_(True)
    report = SolveReport()
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != wide):
        trajectory = odeint(
            lambda t, y: net(y),
            y0,
            torch.linspace(0, 1, 9, dtype=wide),
            method="rk4_classical",
            report=report,
            checkpoint=checkpoint,
            memory_budget=memory_budget,
            scaler=DynamicAdjointScaler() if scaler else None,
        )
    grads = torch.autograd.grad(trajectory[-1].pow(2).sum(), [y0, *net.parameters()])
    return torch.cat([g.reshape(-1).double() for g in grads]), report


def test_stored_stages_and_the_recomputed_backward_give_the_same_bits_in_float64():
    stages, kept = _mlp_gradients(torch.float64, "stages")
    states, rebuilt = _mlp_gradients(torch.float64, "states")
    assert kept.checkpoint == "stages" and rebuilt.checkpoint == "states"
    assert torch.equal(stages, states)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stored_stages_and_the_recomputed_backward_differ_within_the_low_dtype_s_roundoff(dtype):
    """The stored stages differentiate the forward's own graph (from the float32 state), the recompute one rebuilt from
    the stored low-precision state: each is as far from the float64 gradients as the other, and they are closer to
    each other than to them."""
    truth, _ = _mlp_gradients(torch.float64, "states")
    stages, _ = _mlp_gradients(dtype, "stages", scaler=dtype == torch.float16)
    states, _ = _mlp_gradients(dtype, "states", scaler=dtype == torch.float16)
    scale = float(truth.abs().max())
    error_stages, error_states = (float((g - truth).abs().max()) / scale for g in (stages, states))
    between = float((stages - states).abs().max()) / scale
    eps = torch.finfo(dtype).eps
    assert 0 < between <= max(error_stages, error_states) <= 64 * eps, (between, error_stages, error_states)
    assert max(error_stages, error_states) <= 4 * min(error_stages, error_states)


def test_auto_keeps_the_stages_where_they_fit_the_budget_and_recomputes_where_not():
    float64, _ = _mlp_gradients(torch.float64, "stages")
    for budget, ran in ((None, "stages"), (10**12, "stages"), (0, "states")):
        gradients, report = _mlp_gradients(torch.float64, "auto", budget)
        assert report.checkpoint == ran and torch.equal(gradients, float64)
    # In low precision the stages dropped after the second step give the low-memory path's bits.
    for dtype in (torch.bfloat16, torch.float16):
        dropped, report = _mlp_gradients(dtype, "auto", 0)
        assert report.checkpoint == "states" and torch.equal(dropped, _mlp_gradients(dtype, "states")[0])
        assert not torch.equal(dropped, _mlp_gradients(dtype, "stages")[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_stored_stages_hold_no_buffer_of_low_precision_states(dtype):
    """With the stages kept beside a float32 trajectory the backward needs no stored low-precision states, and its tape
    holds no storage the size of them (an empty view of such a buffer would keep all N+1 alive); the gradients are
    the bits of the stages' backward either way."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    y0 = torch.randn(16, 4, requires_grad=True)
    t = torch.linspace(0, 1, 9)
    sizes: list[tuple[torch.dtype, int]] = []

    def pack(tensor):
        sizes.append((tensor.dtype, tensor.untyped_storage().nbytes()))
        return tensor

    report = SolveReport()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), torch.autocast("cpu", dtype=dtype):
        trajectory = odeint(lambda s, y: net(y), y0, t, method="rk4_classical", report=report, checkpoint="stages")
    states_bytes = len(t) * y0.numel() * dtype.itemsize
    assert report.checkpoint == "stages" and trajectory.dtype == torch.float32
    assert (dtype, states_bytes) not in sizes, sizes
    gradients = torch.autograd.grad(trajectory[-1].pow(2).sum(), [y0, *net.parameters()])
    again, _ = _mlp_gradients(dtype, "stages")
    assert torch.equal(torch.cat([g.reshape(-1).double() for g in gradients]), again)


@pytest.mark.parametrize(
    "call, words",
    [
        (dict(checkpoint="graph"), "checkpoint must be one of auto, stages, states, not 'graph'"),
        (dict(memory_budget=-1), "memory_budget must be a number of bytes"),
        (dict(checkpoint="stages", t_grad=True), "a gradient with respect to t does not use"),
    ],
)
def test_a_checkpoint_this_solve_cannot_run_is_one_error(call, words):
    t = torch.linspace(0, 1, 3, dtype=torch.float64).requires_grad_(call.pop("t_grad", False))
    with pytest.raises(ValueError, match=words):
        odeint(lambda s, y: -y, torch.ones(2, dtype=torch.float64, requires_grad=True), t, method="euler", **call)


@pytest.mark.parametrize("checkpoint", ["stages", "states"])
@pytest.mark.parametrize("method", ["euler", "rk4"])
@pytest.mark.parametrize("recorded", [False, True])
def test_a_parameter_the_field_returns_as_it_is_gets_its_own_gradient(checkpoint, method, recorded):
    # Autograd hands the step's cotangent itself to such a parameter: its first sum, formed in place where nothing else
    # holds the part, must not be formed in the adjoint (dy/dt = p: y(1) = y0 + p, so both gradients are the loss's).
    p = torch.full((3, 2), 0.5, requires_grad=True)
    y0 = torch.zeros(3, 2, requires_grad=True)
    t = torch.linspace(0, 1, 5)
    report = SolveReport() if recorded else None
    trajectory = odeint(lambda s, y: p, y0, t, method=method, params=[p], checkpoint=checkpoint, report=report)
    (2 * trajectory[-1]).sum().backward()
    assert torch.equal(p.grad, torch.full((3, 2), 2.0)) and torch.equal(y0.grad, torch.full((3, 2), 2.0))


def test_the_engine_entry_point_gives_autograd_grads_gradients_bit_for_bit():
    from roundoff_analyzer.solvers import native

    if native._ENGINE_RUN_BACKWARD is None:
        pytest.skip(f"torch {torch.__version__}: the engine's entry point is not used on this release")
    generator = torch.Generator().manual_seed(0)
    w, unused = torch.randn(5, 5, generator=generator, requires_grad=True), torch.randn(3, requires_grad=True)
    y = torch.randn(4, 5, generator=generator, requires_grad=True)
    outputs = [torch.tanh(y @ w), (y * 2).sin()]
    cotangents = [torch.randn(4, 5, generator=generator), torch.randn(4, 5, generator=generator)]
    inputs = [y, w, unused]
    # Retained, so that both calls take the same graph; `unused` is reached by no output: zeros, as grad materialises.
    direct = native._vector_jacobian_product(outputs, inputs, cotangents, retain=True, direct=True)
    through_grad = native._vector_jacobian_product(outputs, inputs, cotangents, retain=True, direct=False)
    assert [g.shape for g in direct] == [x.shape for x in inputs]
    assert all(torch.equal(a, b) for a, b in zip(direct, through_grad))
    assert not direct[2].any() and direct[0].any()
    # Not retained: the graph is freed, as grad frees it.
    native._vector_jacobian_product(outputs, inputs, cotangents, retain=False, direct=True)
    with pytest.raises(RuntimeError, match="second time"):
        torch.autograd.grad(outputs, [y], cotangents)
