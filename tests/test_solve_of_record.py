"""The solve of record of a step that makes several solves: by default the one of the longest span (an ODE-RNN
encoder's short segments are not what the loss reads), or the one the Problem names; its states are the rows'
`sol_rel_err` and `final_rel_err`, its span their `t0` and `t1`. Checked against the step run here with torchdiffeq
called directly, every solve's states kept."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
import torchdiffeq
from torch import nn

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError

from .test_step_problems import _seeded, rel_err

N = 4
SEGMENTS = (0.0, 0.1, 0.2, 0.3)  # the encoder's short solves, then one decoder solve over [0, 2]


class EncoderDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder_field = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))
        self.decoder_field = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3))


def _field(net: nn.Module):
    return lambda t, y: net(y)


def _step(model, batch, odeint):
    h = batch
    for a, b in zip(SEGMENTS, SEGMENTS[1:]):
        h = odeint(_field(model.encoder_field), h, torch.tensor([a, b]))[-1]
    decoded = odeint(_field(model.decoder_field), h, torch.tensor([0.0, 1.0, 2.0]))
    return decoded.pow(2).mean()


def encoder_decoder(solve_of_record: int | None = None, seed: int = 0) -> ra.Problem:
    return ra.Problem(
        model=EncoderDecoder(),
        step=_step,
        sample_batch=lambda k: torch.randn(16, 3, generator=torch.Generator().manual_seed(k)),
        solve_of_record=solve_of_record,
    )


def _every_solve(low: torch.dtype | None) -> list[torch.Tensor]:
    """The step with torchdiffeq's rk4 on N equal steps across each solve's span, in float64 or under autocast: every
    solve's states at its output times."""
    dtype = torch.float64 if low is None else torch.float32
    model = copy.deepcopy(_seeded(lambda: encoder_decoder().model)).to(dtype)
    states = []

    def odeint(func, y0, t, **ignored):
        grid = torch.linspace(float(t[0]), float(t[-1]), N + 1, dtype=dtype)
        solved = torchdiffeq.odeint(func, y0, grid, method="rk4")
        on_t = solved[[int(round(float((time - t[0]) / (t[-1] - t[0]) * N))) for time in t]]
        states.append(on_t.detach())
        return on_t

    batch = encoder_decoder().sample_batch(0).to(dtype)
    with torch.autocast("cpu", dtype=low or torch.float16, enabled=low is not None):
        _step(model, batch, odeint)
    return states


def _sweep(out: Path, **options) -> ra.SweepResult:
    return ra.sweep(
        model=encoder_decoder,
        options=options,
        out=out,
        progress=False,
        timesteps=[N],
        method="rk4",
        library="torchdiffeq",
        dtype="float16",
        scaling="none",
        noise_batches=0,
        executor="local",
    )


@pytest.mark.parametrize(("named", "index"), [(None, 3), (0, 0), (-4, 0)])
def test_the_solve_of_record_is_the_longest_or_the_one_named_and_the_rows_compare_its_states(tmp_path, named, index):
    result = _sweep(tmp_path / "sweep", **({} if named is None else {"solve_of_record": named}))
    row = result.results.iloc[0]
    low, high = _every_solve(torch.float16), _every_solve(None)
    assert len(low) == result.manifest["problem"]["n_solves"] == 4
    assert row["sol_rel_err"] == pytest.approx(rel_err(low[index], high[index]), rel=1e-6)
    assert row["final_rel_err"] == pytest.approx(rel_err(low[index][-1], high[index][-1]), rel=1e-6)
    span = (0.0, 2.0) if index == 3 else (0.0, 0.1)
    assert (row["t0"], row["t1"]) == pytest.approx(span)
    problem = result.manifest["problem"]
    assert (problem["solve_of_record"], problem["solve_of_record_named"]) == (index, named is not None)
    glossary = (result.folder / "report.md").read_text()
    if index == 3:
        assert "the solution is that of the step's solve of record (4 of 4, the longest span;" in glossary
    else:
        assert "(1 of 4, named by the Problem's solve_of_record;" in glossary


def test_a_solve_of_record_that_names_no_solve_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match=re.escape("solve_of_record=4 names no solve: its step makes 4 solves")) as no:
        _sweep(tmp_path / "sweep", solve_of_record=4)
    assert "\n" not in str(no.value) and not (tmp_path / "sweep").exists()


def test_the_fingerprint_holds_the_solve_of_record_of_a_step_of_several_solves(tmp_path):
    """A folder written when the first solve was the one of record (before the longest span was the default) holds
    another sweep's rows: its fingerprint, without this key, does not match."""
    fingerprint = _sweep(tmp_path / "sweep").manifest["fingerprint"]
    assert fingerprint["solve_of_record"] == 3
