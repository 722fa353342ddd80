"""The discretisation error and the gradient noise beside the roundoff, against closed forms; the verdict's rules.

The linear model dy/dt = A y with N(0, I) data has both in closed form: the exact solution is expm(tA) y0 (its
gradients by autograd through the matrix exponential), euler and rk4 are matrix powers of their stability
functions, and the gradient of each data row is a quadratic form in it, so the noise of a batch mean has a
closed-form expectation.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from roundoff_analyzer.axes.models import parse_options, resolve_model
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.judging import verdict
from roundoff_analyzer.judging.answer import answers
from roundoff_analyzer.judging.choice import choose
from roundoff_analyzer.measuring.gradient_noise import batch_gradients, relative_spread, relative_uncertainty
from roundoff_analyzer.report.sections.answer import headline
from roundoff_analyzer.report.sections.verdict import sentence

from .conftest import results, run_cli

D, BATCH, SEED = 3, 8, 0
NOISE_BATCHES = 200


@pytest.fixture(scope="module")
def linear_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("linear") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "-o",
        f"d={D}",
        "-o",
        f"batch={BATCH}",
        "-o",
        f"seed={SEED}",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--method",
        "euler,rk4",
        "--timesteps",
        "4,8",
        "--noise-batches",
        str(NOISE_BATCHES),
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return results(out)


def _problem():
    model = resolve_model("linear")
    return model.build(parse_options(model, {"d": D, "batch": BATCH, "seed": SEED}), torch.device("cpu"))


def _loss(trajectory):
    return 0.5 * (trajectory**2).mean()


def _stability_matrix(method: str, h_a: torch.Tensor) -> torch.Tensor:
    """One step's matrix: euler I + hA, rk4 (classical or the 3/8 rule alike on a linear problem) its Taylor
    polynomial."""
    eye = torch.eye(h_a.shape[0], dtype=h_a.dtype)
    if method == "euler":
        return eye + h_a
    return eye + h_a + h_a @ h_a / 2 + h_a @ h_a @ h_a / 6 + h_a @ h_a @ h_a @ h_a / 24


def _solution_and_grads(a: torch.Tensor, y0: torch.Tensor, n: int, method: str | None):
    """Trajectory at t = k/n, and the loss's gradients w.r.t. y0 and A: exact (method None) or of the method's steps."""
    a = a.detach().clone().requires_grad_(True)
    y0 = y0.detach().clone().requires_grad_(True)
    if method is None:
        states = [y0 @ torch.linalg.matrix_exp(a * (k / n)).T for k in range(n + 1)]
    else:
        step = _stability_matrix(method, a / n)
        states = [y0]
        for _ in range(n):
            states.append(states[-1] @ step.T)
    trajectory = torch.stack(states)
    grad_y0, grad_a = torch.autograd.grad(_loss(trajectory), [y0, a])
    return trajectory.detach(), grad_y0, grad_a


def _rel(x, ref):
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


def test_discretisation_error_matches_the_closed_form(linear_sweep):
    problem = _problem()
    a = problem.func.linear.weight.detach().double()
    y0 = problem.y0.double()
    for row in linear_sweep.itertuples():
        exact = _solution_and_grads(a, y0, row.n_timesteps, None)
        steps = _solution_and_grads(a, y0, row.n_timesteps, row.method)
        expected = {
            "disc_sol_rel_err": _rel(steps[0], exact[0]),
            "disc_final_rel_err": _rel(steps[0][-1], exact[0][-1]),
            "disc_grad_y0_rel_err": _rel(steps[1], exact[1]),
            "disc_grad_params_rel_err": _rel(steps[2], exact[2]),
        }
        for column, value in expected.items():
            # The fine reference is RK4 with 64 steps: its own error is (8/64)^4 = 2.4e-4 of RK4's at n = 8, and far
            # less of euler's, so the measured discretisation error agrees with the closed form to 1e-3 of itself.
            assert math.isclose(getattr(row, column), value, rel_tol=1e-3), (row.method, row.n_timesteps, column)
        # The run's total error is its roundoff and the discretisation error together (the triangle inequality; the
        # roundoff is relative to the float64 run's gradient, whose norm is within the discretisation error of the exact
        # one).
        disc = expected["disc_grad_params_rel_err"]
        assert abs(row.total_grad_params_rel_err - disc) <= row.grad_params_rel_err * (1 + disc) * 1.001 + 1e-12
        assert row.grad_params_roundoff_to_disc == pytest.approx(row.grad_params_rel_err / row.disc_grad_params_rel_err)
        assert row.fine_ref_steps == 64 and row.fine_ref_grad_params_rel_err < 1e-6


def _closed_form_noise(batch: int) -> float:
    """Each data row's gradient w.r.t. A is v(y) = (yᵀ M_p y)_p, so for y ~ N(0, I) its mean is (tr M_p)_p and its
    covariance has trace 2 Σ_p ‖M_p‖²_F; a batch mean of `batch` rows has 1/batch of that spread."""
    problem = _problem()
    a = problem.func.linear.weight.detach().double()
    n = 8  # the noise grid: 8 steps, or the sweep's largest n_timesteps if smaller

    def row_gradient(y: torch.Tensor) -> torch.Tensor:
        # The batch loss is the mean of the rows' losses, so the batch gradient is the mean of these.
        return _solution_and_grads(a, y.reshape(1, D), n, None)[2].flatten()

    eye = torch.eye(D, dtype=torch.float64)
    quadratic = torch.zeros(D * D, D, D, dtype=torch.float64)  # M_p for every parameter p
    for i in range(D):
        quadratic[:, i, i] = row_gradient(eye[i])
        for j in range(i):
            both = row_gradient(eye[i] + eye[j]) - row_gradient(eye[i]) - row_gradient(eye[j])
            quadratic[:, i, j] = quadratic[:, j, i] = both / 2
    mean = quadratic.diagonal(dim1=1, dim2=2).sum(-1)
    noise = 2 * (quadratic**2).sum() / batch
    return math.sqrt(noise / (mean.pow(2).sum() + noise))


def test_gradient_noise_matches_the_closed_form(linear_sweep):
    measured = linear_sweep.grad_noise_rel.unique()
    assert len(measured) == 1 and linear_sweep.grad_noise_batches.unique().tolist() == [NOISE_BATCHES]
    # 200 batch gradients of 9 entries estimate the spread to a few percent (its relative standard error is at most
    # sqrt(1 / (2 · 199)) = 5% even for one effective dimension); 15% is three of those.
    assert measured[0] == pytest.approx(_closed_form_noise(BATCH), rel=0.15)
    assert (linear_sweep.roundoff_to_noise == linear_sweep.grad_params_rel_err / measured[0]).all()
    assert linear_sweep.grad_noise_batch_size.unique().tolist() == [BATCH]
    # The jackknife's, below a standard deviation's along one direction: the 9 gradient entries spread in more than one.
    (uncertainty,) = linear_sweep.grad_noise_uncertainty.unique()
    assert 0 < uncertainty < 1 / math.sqrt(2 * (NOISE_BATCHES - 1))


def test_the_noise_is_measured_at_the_batch_size_asked_for(tmp_path):
    """Four times the sweep's batch (each noise batch four of the sampler's, joined): half the spread, as the closed
    form says, and the rows say at which batch size."""
    out = tmp_path / "sweep"
    grid = ["--library", "native", "--dtype", "float16", "--scaling", "none", "--method", "rk4", "--timesteps", "4"]
    options = ["-o", f"d={D}", "-o", f"batch={BATCH}", "-o", f"seed={SEED}"]
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        *options,
        *grid,
        "--noise-batches",
        str(NOISE_BATCHES),
        "--noise-batch-size",
        str(4 * BATCH),
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert table.grad_noise_batch_size.tolist() == [4 * BATCH]
    assert table.grad_noise_rel.iloc[0] == pytest.approx(_closed_form_noise(4 * BATCH), rel=0.15)
    assert json.loads((out / "manifest.json").read_text())["fingerprint"]["noise_batch_size"] == [4 * BATCH]


def test_the_noise_uncertainty_is_the_jackknifes_where_one_batch_dominates():
    """Sixteen batch gradients, one of them far out: the jackknife sees it, and states the noise far less sure than
    the same batches without it."""
    calm = torch.ones(16, 5, dtype=torch.float64) + 0.01 * torch.randn(
        16, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    wild = calm.clone()
    wild[3] += 0.5
    assert relative_uncertainty(wild) > 2 / math.sqrt(2 * 15) > 2 * relative_uncertainty(calm)


def _synthetic_gradients(shape: str, generator: torch.Generator):
    """Batch gradients of 300 entries: a mean gradient 5 times their spread's size, and the spread along many
    directions, along one, or along many with a heavy-tailed size per batch (Student's t, 5 degrees of freedom)."""
    mean = 3 * torch.randn(300, generator=generator, dtype=torch.float64)
    scales = torch.linspace(0.2, 1, 300, dtype=torch.float64)
    direction = torch.randn(300, generator=generator, dtype=torch.float64)

    def draw(count: int) -> torch.Tensor:
        noise = torch.randn(count, 300, generator=generator, dtype=torch.float64)
        if shape == "one direction":
            return mean + noise[:, :1] * direction + 0.01 * noise
        if shape == "heavy tails":
            squares = (torch.randn(count, 5, generator=generator, dtype=torch.float64) ** 2).sum(dim=1)
            return mean + noise * scales * (5 / squares).sqrt()[:, None]
        return mean + noise * scales

    return draw


def _spread_over_draws(draws: list[torch.Tensor]) -> tuple[float, list[float]]:
    """The relative standard deviation of the noise over independent draws of its batches (what its uncertainty should
    be), and the uncertainty stated for each draw."""
    noise = torch.tensor([relative_spread(d) for d in draws], dtype=torch.float64)
    return float(noise.std() / noise.mean()), [relative_uncertainty(d) for d in draws]


@pytest.mark.parametrize("shape", ["many directions", "one direction", "heavy tails"])
def test_the_stated_noise_uncertainty_is_the_spread_of_independent_draws(shape):
    """400 independent draws of 16 batch gradients: the uncertainty stated from each draw alone is, on average, the
    spread of the noise over the draws (which 400 draws know to about 4%), whether the gradients spread along many
    directions (far below a standard deviation's along one, 1/sqrt(2 · 15) = 18%), along one (about that) or with a
    heavy tail (the jackknife then errs low, as a variance's estimate from a heavy-tailed sample does)."""
    draw = _synthetic_gradients(shape, torch.Generator().manual_seed(0))
    truth, stated = _spread_over_draws([draw(16) for _ in range(400)])
    assert 0.75 * truth <= sum(stated) / len(stated) <= 1.25 * truth
    if shape == "many directions":
        assert truth < 0.1 / math.sqrt(2 * 15)


@pytest.mark.slow  # 1920 float64 gradients of the linear model through the sweep's own code: 20-50 s
def test_the_stated_noise_uncertainty_of_a_real_model_is_the_spread_of_independent_draws():
    """The linear model's noise measured as a sweep measures it (its batch sampler, the float64 native solve), 120
    times from 16 batches of its own: the uncertainty each draw states is, on average, the spread over the draws."""
    copies = ProblemCopies(_problem())
    batches = 16
    gradients, stopped = batch_gradients(copies, 4, range(1, 120 * batches + 1), torch.device("cpu"))
    assert stopped is None
    draws = [torch.stack(gradients[k : k + batches]) for k in range(0, len(gradients), batches)]
    truth, stated = _spread_over_draws(draws)
    assert 0.75 * truth <= sum(stated) / len(stated) <= 1.25 * truth
    assert truth < 0.75 / math.sqrt(2 * (batches - 1))  # the formula it replaced states more


# --- the verdict's rules, on small tables of the shape the sweep writes ------------------------------------------


def _runs(
    scaling: str, grad_err: float, noise: float = 0.1, disc: float = 0.1, status: str = "ok", dtype: str = "float16"
):
    rows = []
    for method, n in (("euler", 8), ("euler", 16)):
        rows.append(
            {
                "model": "m",
                "library": "torchdiffeq",
                "method": method,
                "n_timesteps": n,
                "dtype": dtype,
                "scaling": scaling,
                "mode": "autocast",
                "status": status,
                "failure_class": "overflow" if status == "failed" else None,
                "grad_params_rel_err": grad_err if status == "ok" else None,
                "grad_params_rel_err_over_u": grad_err / 2**-11,
                "sol_rel_err": grad_err / 10,
                "grad_noise_rel": noise,
                "roundoff_to_noise": grad_err / noise if status == "ok" else None,
                "disc_sol_rel_err": disc,
                "fine_ref_final_rel_err": 1e-9,
                "sol_roundoff_to_disc": grad_err / 10 / disc,
                "disc_grad_params_rel_err": disc,
                "fine_ref_grad_params_rel_err": 1e-9,
                "grad_params_roundoff_to_disc": grad_err / disc,
            }
        )
    return rows


def _verdict(*setups) -> verdict.Verdict:
    (found,) = verdict.verdicts(pd.DataFrame([row for setup in setups for row in setup]))
    return found


def _float16_kept_or_not(uncertainty: float) -> pd.DataFrame:
    """float16 unscaled at 0.0104× the noise, against float16 keeping two modules in float32 with `grad` at 0.00982×:
    both safe for training, 6% apart."""
    plain = [{**row, "keep_float32": "none"} for row in _runs("none", 0.00104, disc=0.001)]
    kept = [{**row, "keep_float32": "a+b"} for row in _runs("grad", 0.000982, disc=0.001)]
    return pd.DataFrame(plain + kept).assign(
        grad_noise_uncertainty=uncertainty, time_forward_s=1.0, time_backward_s=1.0
    )


@pytest.mark.unit
@pytest.mark.parametrize("uncertainty", [0.183, 0.03])
def test_the_simplest_safe_setup_is_chosen_and_the_answer_says_what_more_would_buy(uncertainty):
    """Fewer changes win among setups safe for training, however well the noise tells their ratios apart; the
    headline says what the kept modules and the scaling would buy."""
    table = _float16_kept_or_not(uncertainty)
    chosen = choose(table)
    assert chosen is not None and chosen.answer.dtype == "float16" and chosen.answer.scaling == "none"
    said = headline(table, answers(table), {}, "cpu")
    buys = "keeping `a`, `b` in float32 and `grad` loss scaling lowers it to 0.00982×; not needed"
    if 0.00982 * (1 + uncertainty) < 0.0104:  # told apart by the noise: what the extra changes would buy
        assert chosen.lower is not None and chosen.lower.kept == "a+b" and chosen.lower.judgement.scaling == "grad"
        assert buys in said and "next best float16 keeping" not in said, said
    else:  # within the noise's uncertainty they buy nothing it can tell: the next best only
        assert chosen.lower is None and "not needed" not in said, said
        assert "next best float16 keeping a+b in float32 (safe for training, 0.00982× the noise)" in said, said


@pytest.mark.unit
def test_a_dtypes_answer_is_its_simplest_safe_setup_the_ratio_only_breaking_ties():
    """Two setups of one dtype, both safe for training: the unscaled one goes first, whatever the noise's uncertainty
    and however much smaller the scaled one's ratio; between two equally simple ones, the smaller ratio."""
    unscaled = _runs("none", 0.00104, disc=0.001)
    for uncertainty in (0.183, 0.03):
        scaled = [{**row, "library": "torchdiffeq"} for row in _runs("grad", 0.0000982, disc=0.001)]
        (a,) = answers(pd.DataFrame(unscaled + scaled).assign(grad_noise_uncertainty=uncertainty))
        assert a.scaling == "none", uncertainty
    other = [{**row, "mode": "pure"} for row in _runs("none", 0.000982, disc=0.001)]
    (a,) = answers(pd.DataFrame(unscaled + other))
    assert a.mode == "pure"  # as simple, and the smaller roundoff against the noise


@pytest.mark.unit
def test_the_users_own_library_goes_before_another_and_no_float32_part_before_one():
    """torchdiffeq (what a model's own calls are) before the native solver that replaces it, both unscaled and safe
    for training; of two placements of the loss, the one without a float32 part; each whatever the ratios."""
    own = _runs("none", 0.00104, disc=0.001)
    native = [{**row, "library": "native"} for row in _runs("none", 0.0000982, disc=0.001)]
    table = pd.DataFrame(native + own)
    (a,) = answers(table)
    assert a.library == "torchdiffeq"
    chosen = choose(table)
    assert chosen is not None and chosen.lower is not None and chosen.lower.judgement.library == "native"
    said = headline(table, answers(table), {}, "cpu")
    assert "native in place of torchdiffeq lowers it to 0.000982×; not needed" in said, said
    in_float32 = [{**row, "loss_in": "float32"} for row in _runs("none", 0.0000982, disc=0.001)]
    in_autocast = [{**row, "loss_in": "autocast"} for row in _runs("none", 0.00104, disc=0.001)]
    (a,) = answers(pd.DataFrame(in_float32 + in_autocast))
    assert a.loss_in == "autocast"


@pytest.mark.unit
def test_a_scaled_setup_decides_the_verdict_only_where_the_unscaled_one_is_not_safe_for_training():
    """Unscaled safe for training, `grad` safe: training needs no scaling, and the verdict says the unscaled label."""
    found = _verdict(_runs("none", 0.001, noise=0.1, disc=0.001), _runs("grad", 1e-6, noise=0.1, disc=0.001))
    assert found.unscaled is not None and found.unscaled.label == verdict.TRAINING
    assert found.label == verdict.TRAINING and found.decided_by.scaling == "none"


def test_a_scaling_that_makes_the_error_small_is_needed_even_when_nothing_failed():
    # The CNF's float16 case: 73 u unscaled (0.36 of the noise), 0.9 u with grad.
    found = _verdict(_runs("none", 0.036, noise=0.1), _runs("grad", 4.5e-4, noise=0.1))
    assert found.label == verdict.NEEDS_SCALING and found.decided_by.scaling == "grad"
    assert found.unscaled.label == verdict.BORDERLINE and found.reduction == pytest.approx(0.036 / 4.5e-4)
    assert verdict.strong_cuts(pd.DataFrame(_runs("none", 0.036) + _runs("grad", 4.5e-4)))[0][2] == pytest.approx(80)


def test_failures_or_roundoff_at_the_noise_are_unsafe_and_small_roundoff_is_safe():
    assert _verdict(_runs("none", 0.0, status="failed")).label == verdict.UNSAFE
    assert _verdict(_runs("none", 0.2, noise=0.1, disc=10.0)).label == verdict.UNSAFE
    assert _verdict(_runs("none", 1e-3, noise=0.1, disc=0.1)).label == verdict.SAFE
    # Far under the noise, but as large as the discretisation error: training will not feel it, the accuracy will.
    assert _verdict(_runs("none", 1e-3, noise=0.1, disc=1e-3)).label == verdict.TRAINING
    # A discretisation error the fine reference does not resolve is left out rather than trusted.
    unresolved = pd.DataFrame(_runs("none", 1e-3, noise=0.1, disc=1e-3)).assign(
        fine_ref_grad_params_rel_err=1e-3, fine_ref_final_rel_err=1e-3
    )
    (found,) = verdict.verdicts(unresolved)
    assert found.label == verdict.SAFE and found.decided_by.unresolved


def test_scaling_that_changes_nothing_is_not_needed():
    found = _verdict(_runs("none", 1e-3), _runs("grad", 1e-3))
    assert (
        found.label == verdict.SAFE
        and found.decided_by.scaling == "none"
        and not verdict.strong_cuts(pd.DataFrame(_runs("none", 1e-3) + _runs("grad", 1e-3)))
    )


def test_float16_adjoint_in_ok_rows_fits_float16(tiny_sweep):
    """The adjoint recorded is the one held in the low dtype: in a run that did not fail, it fit."""
    table = results(tiny_sweep)
    ok = table[(table.dtype == "float16") & (table.status == "ok")]
    assert len(ok) and (ok.max_abs_adjoint.dropna() <= 65504).all()


def test_a_ratio_within_the_noises_uncertainty_of_a_threshold_says_so():
    """0.107× the noise against the 0.1× threshold, the noise known to ±18% (16 batches): borderline, and the line says
    another draw could put it on the other side; 0.05× is clear of it; 1.1× is near the unsafe threshold."""
    assert verdict.near_threshold(0.107, 0.18) == verdict.WELL_UNDER
    assert verdict.near_threshold(0.05, 0.18) is None and verdict.near_threshold(0.107, 0.05) is None
    assert verdict.near_threshold(1.1, 0.18) == verdict.AT_OR_ABOVE
    near = pd.DataFrame(_runs("none", 0.0107, noise=0.1)).assign(
        grad_noise_batches=16, grad_noise_uncertainty=0.18, grad_noise_batch_size=64
    )
    (found,) = verdict.verdicts(near)
    assert found.label == verdict.BORDERLINE and found.decided_by.to_noise_near == verdict.WELL_UNDER
    line = sentence(found, with_mode=False)
    assert "0.107× the gradient noise at batch 64 (euler n = 8; within the noise's ±18% of the 0.1× threshold" in line
    clear = pd.DataFrame(_runs("none", 0.005, noise=0.1)).assign(grad_noise_batches=16, grad_noise_uncertainty=0.18)
    (found,) = verdict.verdicts(clear)
    assert found.decided_by.to_noise_near is None and "within the noise's" not in sentence(found, with_mode=False)
    # A table from before the uncertainty was recorded: what its 16 batches give.
    (old,) = verdict.verdicts(pd.DataFrame(_runs("none", 0.0107, noise=0.1)).assign(grad_noise_batches=16))
    assert old.decided_by.noise_uncertainty == pytest.approx(1 / math.sqrt(30))
