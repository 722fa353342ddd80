"""A training step is handed its batch as training hands it: no tensor of it requires grad unless the user's code makes
it. A batch that requires grad changes what some code does: torchcde's `cdeint` warns that its adjoint leaves the
path's coefficients without a gradient (`adjoint_params`). Here a neural CDE in torchcde's form (its path keeps the
coefficients as buffers, its `cdeint` warns as torchcde's does and calls torchdiffeq's `odeint_adjoint`), and
torchcde's own where installed, sweep without the warning; the same model whose step makes its coefficients require
grad itself (what the sweep did before) warns, and its solution, loss and parameter gradient are the same."""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import pandas as pd
import pytest

import roundoff_analyzer as ra

CDE_FORM = """
    import warnings

    import torch
    import torchdiffeq
    from torch import nn

    import roundoff_analyzer as ra


    class LinearPath(nn.Module):
        # torchcde's interpolations keep their coefficients as buffers.
        def __init__(self, coeffs):
            super().__init__()
            self.register_buffer("coeffs", coeffs)
            self.interval = torch.tensor([0.0, 1.0], dtype=coeffs.dtype)

        def derivative(self, t):
            return self.coeffs[:, 1] - self.coeffs[:, 0]

        def evaluate(self, t):
            return self.coeffs[:, 0] + t * self.derivative(t)


    def cdeint(X, z0, func, t, adjoint=True):
        # As torchcde's cdeint checks its path before calling torchdiffeq.
        if adjoint and any(buffer.requires_grad for buffer in X.buffers()):
            warnings.warn("One of the inputs to the control path X requires gradients but `kwargs['adjoint_params']` "
                          "has not been passed.")
        solve = torchdiffeq.odeint_adjoint if adjoint else torchdiffeq.odeint
        return solve(lambda s, z: (func(s, z) @ X.derivative(s).unsqueeze(-1)).squeeze(-1), z0, t)


    class NeuralCDE(nn.Module):
        def __init__(self, channels=3, hidden=4):
            super().__init__()
            self.hidden, self.channels = hidden, channels
            self.initial, self.readout = nn.Linear(channels, hidden), nn.Linear(hidden, 1)
            self.field = nn.Sequential(nn.Linear(hidden, 8), nn.Tanh(), nn.Linear(8, hidden * channels))

        def forward(self, coeffs):
            path = LinearPath(coeffs)
            z0 = self.initial(path.evaluate(path.interval[0]))
            func = lambda s, z: self.field(z).view(*z.shape[:-1], self.hidden, self.channels)  # noqa: E731
            return self.readout(cdeint(path, z0, func, path.interval)[-1])


    def sample_batch(k):
        generator = torch.Generator().manual_seed(k)
        return torch.randn(16, 2, 3, generator=generator), torch.randn(16, 1, generator=generator)
"""

TORCHCDE = """
    import torch
    import torchcde
    from torch import nn

    import roundoff_analyzer as ra


    class Field(nn.Module):
        def __init__(self, channels=3, hidden=4):
            super().__init__()
            self.hidden, self.channels = hidden, channels
            self.net = nn.Sequential(nn.Linear(hidden, 8), nn.Tanh(), nn.Linear(8, hidden * channels))

        def forward(self, t, z):
            return self.net(z).view(*z.shape[:-1], self.hidden, self.channels)


    class NeuralCDE(nn.Module):
        def __init__(self):
            super().__init__()
            self.field, self.initial, self.readout = Field(), nn.Linear(3, 4), nn.Linear(4, 1)

        def forward(self, coeffs):
            path = torchcde.CubicSpline(coeffs)
            z0 = self.initial(path.evaluate(path.interval[0]))
            return self.readout(torchcde.cdeint(X=path, z0=z0, func=self.field, t=path.interval)[:, -1])


    def sample_batch(k):
        generator = torch.Generator().manual_seed(k)
        t = torch.linspace(0, 1, 6).expand(16, 6)
        x = torch.stack([t, torch.randn(16, 6, generator=generator), torch.randn(16, 6, generator=generator)], -1)
        return torchcde.natural_cubic_coeffs(x), torch.randn(16, 1, generator=generator)
"""

# Either model's factory: the step as its user writes it, or (own_grad) making its coefficients require grad itself.
FACTORY = """
    def factory(own_grad: bool = False, seed: int = 0):
        def step(model, batch, odeint):
            coeffs, targets = batch
            if own_grad:  # the user's own choice: the sweep keeps it
                coeffs.requires_grad_(True)
            return (model(coeffs) - targets).pow(2).mean()

        torch.manual_seed(seed)
        return ra.Problem(model=NeuralCDE(), step=step, sample_batch=sample_batch)
"""

MEASURED = ["sol_rel_err", "final_rel_err", "loss_rel_err", "grad_params_rel_err"]


def _sweep(source: Path, out: Path, own_grad: bool) -> tuple[ra.SweepResult, list[str]]:
    """The sweep of `source`'s factory and the adjoint_params warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ra.sweep(
            model=f"{source}:factory",
            options={"own_grad": own_grad},
            out=out,
            timesteps=[4],
            method="rk4",
            library=["native", "torchdiffeq"],
            dtype="float16",
            scaling="none",
            noise_batches=0,
            executor="local",
            progress=False,
            report=False,
        )
    return result, [str(w.message) for w in caught if "adjoint_params" in str(w.message)]


@pytest.mark.parametrize("form", ["torchcde-form", pytest.param("torchcde", marks=pytest.mark.slow)])
def test_a_neural_cde_is_handed_its_batch_without_grad_and_measures_what_it_did_with_it(tmp_path, form):
    if form == "torchcde":
        pytest.importorskip("torchcde", reason="torchcde is not installed (pip install torchcde)")
    source = tmp_path / f"{form.replace('-', '_')}_model.py"
    source.write_text(textwrap.dedent(TORCHCDE if form == "torchcde" else CDE_FORM) + textwrap.dedent(FACTORY))
    try:
        as_trained, warned = _sweep(source, tmp_path / "as_trained", own_grad=False)
        differentiated, warned_own = _sweep(source, tmp_path / "own_grad", own_grad=True)
    finally:
        sys.modules.pop(f"roundoff_user_{source.stem}", None)
    assert warned == [], warned[:1]
    assert warned_own, "the model's step that makes its batch require grad should warn, as torchcde does"
    for result in (as_trained, differentiated):
        assert (result.results["status"] == "ok").all(), result.results["failure_message"].tolist()
    # A gradient nobody measured is empty, not a number, and no batch tensor is among the parameters.
    assert as_trained.results["grad_y0_rel_err"].isna().all()
    assert not as_trained.param_errors["parameter"].str.startswith("batch").any()
    # The batch's grad changes nothing else the sweep measures.
    pd.testing.assert_frame_equal(as_trained.results[MEASURED], differentiated.results[MEASURED])
