"""--per-module on a field whose modules draw random numbers (nn.Dropout(p=0.5) in training mode, a module calling
torch.randn_like): each module's local error is its call against the call re-run in float64 on the numbers that call
drew. Checked against that re-run written here from what each call kept (tests/fixtures/drawing_modules.py): its input,
its draw (the noise's ε; the dropout's mask, read from its output) and its output."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import roundoff_analyzer as ra
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.measuring.draws import DrawMismatch, DrawRecord, same_draws
from roundoff_analyzer.measuring.module_hooks import DRAWS_OTHERWISE

from .fixtures import drawing_modules
from .test_step_problems import _seeded, rel_err

SCALE = 0.1  # the noise's scale, dropout_and_noise's default


def sweep(tmp_path, factory, library: str) -> pd.DataFrame:
    drawing_modules.SEEN.clear()
    result = ra.sweep(
        model=factory,
        timesteps=[4],
        method="rk4",
        library=library,
        dtype="float16",
        scaling="none",
        per_module=True,
        noise_batches=0,
        out=tmp_path / library,
        progress=False,
        report=False,
    )
    assert (result.results["status"] == "ok").all(), result.results["failure_message"]
    return result.modules.set_index(["module", "phase"])


def runs_calls() -> tuple[list[dict], list[tuple[dict, dict]]]:
    """The float16 calls of the sweep's runs: the noise's, and the field's each with its noise's call. They are the
    calls given the float64 reference's draws (the plan's one float16 evaluation, which checks that the step runs,
    draws as torch's generator stands); the watched run's and its recomputations in float16 among them, which hold
    the numbers of the timed run's."""
    kept = drawing_modules.SEEN
    reference_draws = {
        c["epsilon"].numpy().tobytes() for c in kept if "epsilon" in c and c["out"].dtype == torch.float64
    }
    low = [c for c in kept if c["out"].dtype == torch.float16]
    noises = [c for c in low if "epsilon" in c and c["epsilon"].numpy().tobytes() in reference_draws]
    fields = []
    for call in (c for c in low if "field_in" in c):
        noise = next((n for n in noises if torch.equal(n["noise_in"], call["dropout_out"])), None)
        if noise is not None:
            fields.append((call, noise))
    return noises, fields


def dropout_errors(fields: list[tuple[dict, dict]]) -> list[float]:
    """Each dropout call against float64 on its input with its own mask (where its output is not zero), doubled."""
    return [
        rel_err(call["dropout_out"], call["dropout_in"].double() * (call["dropout_out"] != 0) * 2) for call, _ in fields
    ]


def noise_errors(noises: list[dict]) -> list[float]:
    return [rel_err(call["out"], call["noise_in"].double() + SCALE * call["epsilon"]) for call in noises]


def field_errors(fields: list[tuple[dict, dict]]) -> list[float]:
    """Each field call against the float64 field on its input, with its call's mask and its noise call's ε."""
    field = _seeded(drawing_modules.dropout_and_noise)[0].double()
    errors = []
    for call, noise in fields:
        keep = call["dropout_out"] != 0
        with torch.no_grad():
            hidden = torch.tanh(F.linear(call["field_in"].double(), field.inner.weight, field.inner.bias)) * keep * 2
            reference = F.linear(hidden + SCALE * noise["epsilon"], field.outer.weight, field.outer.bias)
        errors.append(rel_err(call["out"], reference))
    return errors


def test_a_dropout_and_a_randn_like_module_are_measured_on_their_calls_own_draws(tmp_path):
    rows = sweep(tmp_path, drawing_modules.dropout_and_noise, "torchdiffeq")
    assert (rows["measurement"] == "complete").all(), rows["measurement"]
    noises, fields = runs_calls()
    assert len(fields) >= 16 and len(noises) >= 16  # rk4 n = 4: 16 calls a run
    dropout, noise, field = dropout_errors(fields), noise_errors(noises), field_errors(fields)
    # A mask and a doubling: exact in float16, on the call's own mask (another mask: an error of order one).
    assert rows.loc[("dropout", "forward"), "local_rel_err"] == max(dropout) == 0
    assert rows.loc[("dropout", "backward"), "local_rel_err"] == 0
    assert rows.loc[("noise", "forward"), "local_rel_err"] == pytest.approx(max(noise), rel=1e-9)
    assert rows.loc[("(vector field)", "forward"), "local_rel_err"] == pytest.approx(max(field), rel=1e-9)
    u = 2.0**-11
    assert 0 < max(noise) < 4 * u and 0 < max(field) < 4 * u


def test_a_solver_that_draws_again_in_its_backward_gives_each_recomputation_its_calls_draws(tmp_path):
    # The native solver evaluates the field again in its backward, drawing there as the reference's backward drew.
    rows = sweep(tmp_path, drawing_modules.dropout_and_noise, "native")
    assert (rows["measurement"] == "complete").all(), rows["measurement"]
    assert rows.loc[("dropout", "forward"), "local_rel_err"] == 0
    assert rows.loc[("dropout", "backward"), "local_rel_err"] == 0
    u = 2.0**-11
    assert (rows["local_rel_err"] < 4 * u).all(), rows["local_rel_err"]


def test_a_module_whose_re_run_draws_otherwise_than_its_call_is_said_not_measured(tmp_path):
    rows = sweep(tmp_path, drawing_modules.jittered, "torchdiffeq")
    # Its float64 re-run runs without autograd, and so draws nothing of what the call drew; its backward recomputation
    # runs with it, and draws what the call drew.
    jitter = rows.loc[("jitter", "forward")]
    assert jitter["measurement"].startswith(DRAWS_OTHERWISE) and pd.isna(jitter["local_rel_err"])
    assert rows.loc[("jitter", "backward"), "measurement"] == "complete"


def test_a_re_run_is_given_its_calls_draws_in_any_dtype_and_the_run_draws_on(tmp_path):
    copies, record = ProblemCopies(_seeded(drawing_modules.dropout_and_noise)), DrawRecord()
    with same_draws(copies, 0, "solve", record) as run:
        before = torch.randn(5)
        mark = record.mark()
        drawn = torch.randn(3, dtype=torch.float16), torch.empty(4).bernoulli_(0.5)
        call = record.since(mark)
        assert call is not None
        again = call.replayed(lambda: (torch.randn(3, dtype=torch.float64), torch.empty(4).bernoulli_(0.5)))()
        after = torch.rand(2)  # the run's next draw, as if no re-run had been made
        with pytest.raises(DrawMismatch, match="its re-run's random draw 1 is randn"):
            call.replayed(lambda: torch.randn(4))()
        run.complete = True
    assert torch.equal(drawn[0], again[0].to(torch.float16)) and torch.equal(drawn[1], again[1])
    with same_draws(copies, 0, "solve") as unwatched:
        assert torch.equal(torch.randn(5), before)
        torch.randn(3, dtype=torch.float16), torch.empty(4).bernoulli_(0.5)
        assert torch.equal(torch.rand(2), after)
        unwatched.complete = True
