"""The discretisation error of a step that draws random numbers: where more steps draw more numbers (a vector field
that draws at each evaluation) a finer grid solves another random ODE, so no fine reference is the step's and no
discretisation error is given; where the draws do not depend on the grid (a loss that draws), the fine reference is
given the draws its float64 references were given."""

from __future__ import annotations

import json

import pandas as pd

import roundoff_analyzer as ra
from roundoff_analyzer.measuring.yardsticks import YARDSTICK_COLUMNS

from .fixtures import drawing_modules, drawing_steps

FINE_COLUMNS = [c for c in YARDSTICK_COLUMNS if c.startswith(("disc_", "fine_ref_", "total_")) or "_to_disc" in c]


def sweep(tmp_path, factory, library: str = "torchdiffeq") -> tuple[pd.DataFrame, dict, str]:
    result = ra.sweep(
        model=factory,
        timesteps=[4, 16],
        method="rk4",
        library=library,
        dtype="float16",
        scaling="none",
        noise_batches=0,
        out=tmp_path / "sweep",
        progress=False,
    )
    assert (result.results["status"] == "ok").all(), result.results["failure_message"]
    manifest = json.loads((tmp_path / "sweep" / "manifest.json").read_text())
    return result.results, manifest["problem"]["draws"], (tmp_path / "sweep" / "report.md").read_text()


def test_a_field_that_draws_at_each_evaluation_gets_no_discretisation_error(tmp_path):
    results, draws, report = sweep(tmp_path, drawing_modules.dropout_and_noise)
    assert draws["grows_with_steps"] is True
    # Before, its "discretisation error" was the difference between two noise realisations (0.06 – 0.18 here).
    assert results[FINE_COLUMNS].isna().all().all(), results[FINE_COLUMNS].T
    assert "**No discretisation error is given**: the step draws more random numbers on a finer grid" in report
    assert "the discretisation error is not known: the step draws more on a finer grid" in report
    assert "against a fine reference (see below)" not in report


def test_a_training_step_whose_field_draws_at_each_evaluation_gets_none_either(tmp_path):
    results, draws, _ = sweep(tmp_path, drawing_steps.dropout)
    assert draws["grows_with_steps"] is True
    assert results[FINE_COLUMNS].isna().all().all(), results[FINE_COLUMNS].T


def test_a_step_that_draws_once_whatever_the_grid_keeps_its_record_and_its_fine_reference(tmp_path):
    results, draws, report = sweep(tmp_path, drawing_steps.held_out)
    assert "grows_with_steps" not in draws  # the record, and so a folder's fingerprint, read as before
    assert results["disc_grad_params_rel_err"].notna().all()
    assert "No discretisation error" not in report


def test_a_loss_that_draws_gets_a_fine_reference_on_its_references_draw(tmp_path):
    # The fine reference of a (func, y0, loss) model: its loss is given the numbers the float64 reference's loss was
    # given. On other numbers the "discretisation error" is the difference between two noise draws, about the same at
    # every n_timesteps (0.45 and 0.33 before); on the same ones it is RK4's, which falls 4^4 = 256x from n = 4 to 16.
    for library in ("torchdiffeq", "native"):
        results, draws, _ = sweep(tmp_path / library, drawing_modules.noisy_loss, library)
        assert "grows_with_steps" not in draws
        disc = results.set_index("n_timesteps")["disc_grad_params_rel_err"]
        assert disc[4] < 1e-5 and disc[4] / disc[16] > 100, disc
