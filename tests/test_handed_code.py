"""The code the answer hands a user runs as handed, for every form of model: written to a file and run in a fresh
process from the folder the sweep ran in, it exits 0 and prints a finite loss per batch. The forms: a built-in model,
each example factory (a training step, a trajectory, a step whose module calls torchdiffeq itself), a model calling
dopri5 in its own module, and a model whose solve is inside an installed package (torchcde's `cdeint` calling
`torchdiffeq.odeint_adjoint`)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.libraries.base import NO_IMPORT_LINE

from .conftest import needs

REPO = Path(__file__).resolve().parents[1]
LOSS = re.compile(r"^loss (\S+)$", re.MULTILINE)


def _sweep(model: str, out: Path, **settings) -> ra.SweepResult:
    grid = {"timesteps": [4], "method": "euler", "library": "native", "dtype": "float16", "scaling": "none"}
    return ra.sweep(
        model=model, out=out, progress=False, **(grid | {"noise_batches": 2, "executor": "local"} | settings)
    )


def _run_as_handed(result: ra.SweepResult, dtype: str, cwd: Path) -> tuple[int, list[float], str]:
    """The answer's code for `dtype` written to a file and run by a fresh Python from `cwd`: its exit status, the
    losses it printed, and its output."""
    code = result.answers[dtype]["code"]
    assert code, result.answers[dtype]
    script = result.folder / "handed.py"  # beside the sweep's files; run from `cwd`
    script.write_text(code + "\n")
    # Nothing of the test's process reaches the script but what a user's shell would give it.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False
    )
    losses = [float(value) for value in LOSS.findall(done.stdout)]
    return done.returncode, losses, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def _assert_runs(result: ra.SweepResult, dtype: str, cwd: Path, batches: int = 2) -> None:
    rc, losses, output = _run_as_handed(result, dtype, cwd)
    assert rc == 0, output
    assert len(losses) == batches and all(math.isfinite(loss) for loss in losses), output


@pytest.mark.slow
def test_a_built_in_models_code_runs_as_handed(tmp_path):
    result = _sweep("otflow", tmp_path / "sweep", options={"d": 3, "hidden": 8, "batch": 16}, timesteps=[4, 16])
    _assert_runs(result, "float16", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "options"),
    [
        ("examples/odeblock.py:odenet", {"batch": 16, "hidden": 8}),
        ("examples/cnf.py:cnf", {"batch": 16, "hidden": 4, "width": 8, "t1": 1.0}),
        ("examples/latent_ode.py:latent_ode", {"batch": 8, "n_obs": 5, "hidden": 8}),
        ("examples/damped_oscillator.py:damped_oscillator", {"hidden": 8, "batch": 8}),  # y0 its only batch
    ],
)
def test_each_example_factorys_code_runs_as_handed_from_the_folder_the_sweep_ran_in(
    monkeypatch, tmp_path, spec, options
):
    """The factory is given relative to the repository, as the examples' docstrings write it: the code imports it by
    that path, so it runs from there."""
    monkeypatch.chdir(REPO)
    result = _sweep(spec, tmp_path / "sweep", options=options, library=["native", "torchdiffeq"])
    assert f'"{spec}"' in result.answers["float16"]["code"]  # the path as the sweep was given it
    _assert_runs(result, "float16", REPO, batches=1 if "oscillator" in spec else 2)


# A model as ANODE writes it: its own module imports torchdiffeq's odeint and calls it with dopri5.
DOPRI5_MODELS = """
    import torch
    from torch import nn
    from torchdiffeq import odeint


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.field = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))

        def forward(self, x):
            return odeint(lambda t, y: self.field(y), x, torch.tensor([0.0, 1.0]), method="dopri5")[-1]
"""
DOPRI5_FACTORY = """
    import torch
    import roundoff_analyzer as ra
    from blocks import Block


    def factory(seed: int = 0):
        def step(model, batch, odeint):  # the model solves itself
            return (model(batch) ** 2).mean()

        def sample_batch(k):
            return torch.randn(16, 2, generator=torch.Generator().manual_seed(k))

        return ra.Problem(model=Block(), step=step, sample_batch=sample_batch)
"""


def _write_package(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in files.items():
        (folder / name).write_text(textwrap.dedent(body))


@pytest.mark.slow
@pytest.mark.parametrize("library", ["native", "torchdiffeq"])
def test_a_model_calling_dopri5_in_its_own_module_runs_as_handed_unedited(monkeypatch, tmp_path, library):
    """The handed code runs the step inside `answered_by`: the dopri5 call solves by the measured method and grid,
    and no line of the model's files is edited."""
    _write_package(tmp_path / "models", {"blocks.py": DOPRI5_MODELS, "dopri.py": DOPRI5_FACTORY})
    before = (tmp_path / "models" / "blocks.py").read_text()
    monkeypatch.chdir(tmp_path)
    result = _sweep("models/dopri.py:factory", tmp_path / "sweep", library=library)
    code = result.answers["float16"]["code"]
    assert "answered_by(solve)" in code and "blocks.py: its `from torchdiffeq import odeint` stands" in code
    _assert_runs(result, "float16", tmp_path)
    assert (tmp_path / "models" / "blocks.py").read_text() == before


CDE_FACTORY = """
    import torch
    import torchcde
    import roundoff_analyzer as ra


    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 3 * 2)

        def forward(self, t, z):
            return torch.tanh(self.linear(z)).view(z.shape[0], 3, 2)


    class CDE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.field, self.initial, self.readout = Field(), torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)

        def forward(self, coefficients):
            path = torchcde.CubicSpline(coefficients)
            z0 = self.initial(path.evaluate(path.interval[0]))
            z = torchcde.cdeint(X=path, func=self.field, z0=z0, t=path.interval, adjoint=True)
            return self.readout(z[:, -1])


    def factory(seed: int = 0):
        def step(model, batch, odeint):  # torchcde solves
            coefficients, target = batch
            return ((model(coefficients).squeeze(-1) - target) ** 2).mean()

        def sample_batch(k):
            generator = torch.Generator().manual_seed(k)
            t = torch.linspace(0, 1, 6)
            x = torch.stack([t.expand(8, 6), torch.randn(8, 6, generator=generator).cumsum(1) / 3], dim=-1)
            return torchcde.hermite_cubic_coefficients_with_backward_differences(x), x[:, -1, 1]

        return ra.Problem(model=CDE(), step=step, sample_batch=sample_batch)
"""


@pytest.mark.slow
def test_a_model_whose_solve_is_inside_an_installed_package_runs_as_handed(monkeypatch, tmp_path):
    """torchcde's `cdeint` calls `torchdiffeq.odeint_adjoint` inside site-packages: the handed code reaches it with
    `answered_by`, the torchdiffeq rows' adjoint call answered by torchdiffeq's adjoint as the sweep answered it."""
    pytest.importorskip("torchcde", reason="torchcde is not installed: the package-internal solve needs it")
    _write_package(tmp_path, {"cde.py": CDE_FACTORY})
    monkeypatch.chdir(tmp_path)
    result = _sweep("cde.py:factory", tmp_path / "sweep", library="torchdiffeq")
    assert (result.results["status"] == "ok").all(), result.results["failure_message"]
    routed = result.manifest["problem"]["routed"]
    assert [(r["caller"], r["function"]) for r in routed] == [("torchcde.cdeint", "odeint_adjoint")]
    code = result.answers["float16"]["code"]
    assert "answered_by(solve, adjoint=solve_adjoint)" in code and "from torchdiffeq import odeint_adjoint" in code
    _assert_runs(result, "float16", tmp_path)


FORMS = [
    ("otflow", {"d": 3, "hidden": 8, "batch": 16}),
    ("examples/cnf.py:cnf", {"batch": 16, "hidden": 4, "width": 8, "t1": 1.0}),  # a step solving with its `odeint`
    ("examples/odeblock.py:odenet", {"batch": 16, "hidden": 8}),  # a step whose module calls torchdiffeq
    ("examples/damped_oscillator.py:damped_oscillator", {"hidden": 8, "batch": 8}),  # a (func, y0, loss)
]
# rampde runs its mixed precision under CUDA autocast only: on a CPU its rows are `pure` (float16 weights and batch).
# native and torchdiffeq: the tests above.
LIBRARIES_BESIDE = ("torchdiffeq-adjoint", "native-low", "torchode", "torchdyn", "rampde")
OPTIONAL = ("torchode", "torchdyn", "rampde")


def _library_forms() -> list:
    cases = []
    for library in LIBRARIES_BESIDE:
        for spec, options in FORMS:
            optional = [needs(library)] if library in OPTIONAL else []
            cases.append(pytest.param(library, spec, options, marks=optional, id=f"{library}-{spec}"))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("library", "spec", "options"), _library_forms())
def test_every_built_in_librarys_code_runs_as_handed(monkeypatch, tmp_path, library, spec, options):
    """For torchode, torchdyn, rampde and torchdiffeq's adjoint, the code imports an `odeint` with torchdiffeq's
    signature that solves through the library's adapter (axes/libraries/handed.py), not one it never imported."""
    monkeypatch.chdir(REPO)
    mode = "pure" if library == "rampde" else "autocast"
    result = _sweep(spec, tmp_path / "sweep", options=options, library=library, mode=mode)
    assert (result.results["status"] == "ok").all(), result.results["failure_message"]
    if library != "native-low":  # the native solver's step code imports equal_steps and odeint in one line
        assert LIBRARIES.get(library).import_line in result.answers["float16"]["code"]
    _assert_runs(result, "float16", REPO, batches=1 if "oscillator" in spec else 2)


@pytest.mark.slow
def test_a_pure_steps_code_casts_the_batch_as_the_runs_did(monkeypatch, tmp_path):
    """In mode `pure` the runs cast the batch's floating-point tensors with the weights: so does the code."""
    monkeypatch.chdir(REPO)
    spec, options = FORMS[1]
    result = _sweep(spec, tmp_path / "sweep", options=options, mode="pure")
    assert "torch.utils._pytree.tree_map(to_low, batch)" in result.answers["float16"]["code"]
    _assert_runs(result, "float16", REPO)


def test_a_plugin_library_without_an_import_line_gets_one_line_saying_what_to_add(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    library = "examples/unrolled_solver.py:library"
    result = _sweep("otflow", tmp_path / "sweep", options={"d": 3, "hidden": 8, "batch": 16}, library=library)
    assert result.answers["float16"]["train"], result.answers["float16"]
    # The library's own name (its `name`; its rows carry its location).
    assert result.answers["float16"]["code"] == NO_IMPORT_LINE.format(name="unrolled-rk")
