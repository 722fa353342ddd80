"""Causes said only as far as the data show them (tests/fixtures/public_patterns.py): a low order of the fine reference
blamed on linear interpolation where the step's output times fall between grid steps, on a kink only where they do
not; narrower values the float64 reference computes with, flagged; a parameter the loss does not depend on said to
have no gradient, not an error of 0; an overflow of a parameter gradient placed where the run's records and its
mode's arithmetic put it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

import roundoff_analyzer as ra
from roundoff_analyzer.measuring.discretisation import COARSENINGS, fine_steps
from roundoff_analyzer.measuring.narrow_constants import NarrowConstants
from roundoff_analyzer.measuring.one_run import _where_weights_overflowed
from roundoff_analyzer.report.sections.discretisation_and_noise import _own_error
from tests.fixtures import public_patterns

FIXTURE = str(Path(__file__).parent / "fixtures" / "public_patterns.py")
N = 4
COMMON = {
    "method": "euler",
    "library": "torchdiffeq",
    "dtype": "float16",
    "scaling": "none",
    "noise_batches": 0,
    "progress": False,
}


def _sweep(out: Path, factory: str, **settings):
    return ra.sweep(f"{FIXTURE}:{factory}", out=out, **{"timesteps": [N], **COMMON, **settings})


def _discretisation_text(result) -> str:
    report = (result.folder / "report.md").read_text()
    return report.split("## Roundoff against discretisation error", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("n_times", [10, 9])
def test_output_times_between_the_grid_steps_are_counted_and_named_as_the_cause_of_a_low_order(tmp_path, n_times):
    # rk4, so that the fine reference's order is RK4's where nothing else costs it.
    result = _sweep(tmp_path / "sweep", "off_grid", method="rk4", options={"n_times": n_times})
    times = torch.linspace(0.0, 1.0, n_times, dtype=torch.float32).double()
    steps = fine_steps([N])
    expected = max(int((~torch.isin(times, torch.linspace(0.0, 1.0, steps // c + 1))).sum()) for c in COARSENINGS)
    row = result.results.iloc[0]
    assert row["fine_ref_interpolated_times"] == expected
    text = _discretisation_text(result)
    assert "kink" not in text
    if expected:  # k/9 between the steps of j/64: second order, whatever the field
        assert row["fine_ref_grad_params_order"] < 3
        assert f"{expected} output times of the step fell between grid steps" in text
    else:  # k/8 on them: RK4's order, no cause to name
        assert row["fine_ref_grad_params_order"] > 3.5
        assert "interpolation" not in text


def test_a_low_order_is_blamed_on_a_kink_only_where_no_output_time_was_interpolated():
    fine = pd.Series(
        {
            "fine_ref_final_rel_err": 1e-9,
            "fine_ref_grad_params_rel_err": 1e-8,
            "fine_ref_final_order": 2.0,
            "fine_ref_grad_params_order": 1.0,
            "fine_ref_interpolated_times": 0,
        }
    )
    assert "a kink in the right-hand side costs it that" in _own_error(fine, step=True)
    interpolated = pd.concat([fine.drop("fine_ref_interpolated_times"), pd.Series({"fine_ref_interpolated_times": 3})])
    assert "3 output times of the step fell between grid steps" in _own_error(interpolated, step=True)
    unknown = fine.drop("fine_ref_interpolated_times")
    # A step's folder from before the count: the cause is not known; a trajectory problem's outputs are its grid's.
    assert "kink" not in _own_error(unknown, step=True) and "interpolation" not in _own_error(unknown, step=True)
    assert "a kink in the right-hand side costs it that" in _own_error(unknown, step=False)


def test_a_float32_constant_the_float64_reference_computes_with_is_flagged_where_the_code_uses_it(tmp_path):
    with pytest.warns(UserWarning, match="the float64 reference computes with float32 values"):
        result = _sweep(tmp_path / "sweep", "float32_prior")
    found = result.manifest["problem"]["narrow_in_float64"]
    assert len(found) == 1
    assert found[0].startswith("public_patterns.py:") and "PRIOR.log_prob(z)" in found[0]
    assert "met a float32 tensor" in found[0]
    report = (result.folder / "report.md").read_text()
    assert "**The float64 reference computes with float32 values of the model's own code**" in report
    assert found[0] in report


def test_a_float32_constant_is_flagged_in_a_step_that_also_draws(tmp_path):
    # The draw replay watches the same evaluation: its mode's frame passes the user's call on, it is not the solver's.
    with pytest.warns(UserWarning, match="the float64 reference computes with float32 values"):
        result = _sweep(tmp_path / "sweep", "float32_prior", options={"draws": True})
    problem = result.manifest["problem"]
    assert problem["draws"]["functions"] == {"randn": 1}
    (found,) = problem["narrow_in_float64"]
    assert "PRIOR.log_prob(z)" in found and "met a float32 tensor" in found


def test_the_float32_values_of_torchdiffeqs_latent_ode_loss_are_found_beside_its_vae_draw(tmp_path):
    result = _sweep(tmp_path / "sweep", "vae_constants")
    found = result.manifest["problem"]["narrow_in_float64"]
    assert result.manifest["problem"]["draws"]["functions"] == {"randn": 1}
    codes = [line.split("`")[1] for line in found]
    assert codes == [
        "z0 = epsilon * torch.exp(0.5 * logvar) + mean",  # the drawn float32 ε
        "const = torch.log(torch.from_numpy(np.array([2.0 * np.pi])).float())",
        "return -0.5 * (const + logvar + (x - mean) ** 2.0 / torch.exp(logvar))",
    ]
    assert result.manifest["problem"]["narrow_unwatched"] is None


def test_a_step_whose_operations_the_watch_cannot_see_is_said_unwatched_not_clean(tmp_path):
    with pytest.warns(UserWarning, match="none of the step's torch operations reached the watch"):
        result = _sweep(tmp_path / "sweep", "float32_prior", options={"hidden": True})
    problem = result.manifest["problem"]
    assert problem["narrow_in_float64"] == [] and "cannot be found" in problem["narrow_unwatched"]
    assert "**The float64 reference was not checked for float32 values**" in (result.folder / "report.md").read_text()


def test_a_step_whose_constants_match_the_reference_or_are_exact_is_not_flagged(tmp_path):
    result = _sweep(tmp_path / "sweep", "float32_prior", options={"matched": True})
    assert result.manifest["problem"]["narrow_in_float64"] == []
    assert result.manifest["problem"]["narrow_unwatched"] is None
    assert "The float64 reference computes with float32" not in (result.folder / "report.md").read_text()


def test_narrow_values_are_seen_where_they_meet_float64_and_where_float64_is_cast_down():
    point = torch.randn(4, 2, dtype=torch.float64)
    with NarrowConstants() as seen:
        point * torch.tensor(0.1)  # a decimal's float32 rounding: flagged
        point * torch.tensor(0.5) - torch.zeros(2)  # exact in every format: not
        point.float()  # a cast that rounds: flagged
        torch.tensor([0.25, 2.0], dtype=torch.float64).float()  # a cast of exact values: not
    lines = seen.lines()
    assert len(lines) == 2
    assert "`mul` met a float32 tensor (0-d)" in lines[0] and "test_causes_with_evidence.py:" in lines[0]
    assert "`float` cast a float64 tensor (4×2) to float32" in lines[1]


@pytest.fixture(scope="module")
def potential(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("potential") / "sweep", "root_weight")


def test_a_parameter_without_gradient_in_either_run_has_no_error_and_is_said_to_have_no_gradient(potential):
    torch.manual_seed(0)
    problem = public_patterns.root_weight()
    model, x = problem.model, problem.sample_batch(0).double().requires_grad_(True)
    model = model.double()
    euler = lambda f, y0, t: torch.stack([y0, y0 + f(t[0], y0)])  # noqa: E731 - one step: the bias never enters
    loss = problem.step(model, x, euler)
    (bias_grad,) = torch.autograd.grad(loss, [model.c.bias], allow_unused=True)
    assert bias_grad is None or not bias_grad.any()
    errors = potential.param_errors.set_index("parameter")
    assert pd.isna(errors.loc["c.bias", "grad_rel_err"]) and pd.isna(errors.loc["c.bias", "grad_rel_err_over_u"])
    assert errors.drop(index="c.bias")["grad_rel_err"].notna().all()
    report = (potential.folder / "report.md").read_text()
    assert "No gradient in either run, the float64 reference's nor the low dtype's (the loss does not depend on it" in (
        report
    )
    assert "`c.bias`." in report


@pytest.fixture(scope="module")
def overflowed(tmp_path_factory):
    return _sweep(
        tmp_path_factory.mktemp("overflow") / "sweep", "weight_overflow", mode=["autocast", "autocast-nocache"]
    )


def test_a_weight_gradient_that_overflows_within_one_step_overflows_in_float16_while_the_adjoint_stays_small():
    problem = public_patterns.weight_overflow()
    x = problem.sample_batch(0)
    layer = problem.model.layer
    adjoint = torch.ones_like(x)  # the loss is the sum of the final state
    with torch.autocast("cpu", dtype=torch.float16):
        share = torch.mm((adjoint / N).t().half(), x.half())  # one euler step's weight gradient
    assert not torch.isfinite(share).all()
    assert torch.isfinite((adjoint @ layer.weight).half()).all()


def test_the_overflow_message_says_the_place_as_far_as_the_mode_shows_it(overflowed):
    runs = overflowed.results.set_index("mode")
    assert (runs["status"] == "failed").all() and runs["overflow_step"].isna().all()
    cached, uncached = runs.loc["autocast", "failure_message"], runs.loc["autocast-nocache", "failure_message"]
    assert "every step's adjoint stayed finite" in cached and "every step's adjoint stayed finite" in uncached
    # With autocast's cache the steps' shares are summed in float16 too: either can have overflowed.
    assert "within one step or in its sum over the steps, both in float16" in cached
    # Without it they are summed in float32, which finite float16 shares cannot overflow.
    assert uncached.endswith("a weight's gradient overflowed within one step")
    assert "the sum of the parameter gradient over the steps overflowed" not in cached + uncached


def test_a_sum_in_float32_of_bfloat16_shares_can_overflow_and_is_not_ruled_out():
    assert _where_weights_overflowed((torch.float16, torch.float32)).endswith("within one step")
    assert "or in its sum" in _where_weights_overflowed((torch.bfloat16, torch.float32))
    assert "or in its sum" in _where_weights_overflowed(None)
