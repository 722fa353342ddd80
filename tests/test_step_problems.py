"""A model given as its training step (`roundoff_analyzer.Problem`): any time span, tuple states, batches with targets,
every parameter of the model. The two examples' rows are checked against float16-against-float64 computations written
here with torchdiffeq alone, not with the tool."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchdiffeq

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES

from .conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
LATENT = REPO / "examples" / "latent_ode.py"
CNF = REPO / "examples" / "cnf.py"
# Small enough for a test, large enough that every part is measured.
LATENT_OPTIONS = {"batch": 8, "n_obs": 6, "hidden": 8}
CNF_OPTIONS = {"batch": 64, "hidden": 8, "width": 8}


def load_example(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rel_err(value: torch.Tensor, reference: torch.Tensor) -> float:
    value, reference = value.double().reshape(-1), reference.double().reshape(-1)
    return float((value - reference).norm() / reference.norm())


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.double().reshape(-1) for t in tensors])


def linear_read_off(grid: torch.Tensor, states: torch.Tensor, times: torch.Tensor) -> torch.Tensor:
    """The states at `times` from the states on `grid`: the step whose end reaches each time, linearly."""
    found = []
    for time in times:
        k = next(i for i in range(1, len(grid)) if (grid[i] >= time if grid[-1] > grid[0] else grid[i] <= time))
        a, b = grid[k - 1], grid[k]
        if time == a:
            found.append(states[k - 1])
        elif time == b:
            found.append(states[k])
        else:
            found.append(states[k - 1] + (time - a) / (b - a) * (states[k] - states[k - 1]))
    return torch.stack(found)


def torchdiffeq_step_run(problem, n_timesteps: int, low: torch.dtype | None):
    """The step in float64 (`low` None) or under autocast in `low`, each solve torchdiffeq's rk4 on n_timesteps equal
    steps across its span and read off linearly: the first solve's states, the loss, and the gradient of every
    parameter. The batch requires no grad, as a training loop hands it."""
    dtype = torch.float64 if low is None else torch.float32
    model = copy.deepcopy(problem.model).to(dtype)
    batch = problem.sample_batch(0)
    batch = tuple(b.to(dtype) for b in batch) if isinstance(batch, tuple) else batch.to(dtype)
    first = []

    def odeint(func, y0, t, **ignored):
        grid = torch.linspace(float(t[0].detach()), float(t[-1].detach()), n_timesteps + 1, dtype=dtype)
        solved = torchdiffeq.odeint(func, y0, grid, method="rk4")
        parts = solved if isinstance(solved, tuple) else (solved,)
        read = tuple(linear_read_off(grid, part, t.detach().to(dtype)) for part in parts)
        first.append(torch.cat([r.reshape(r.shape[0], -1) for r in read], dim=1).detach())
        return read if isinstance(solved, tuple) else read[0]

    with torch.autocast("cpu", dtype=low or torch.float16, enabled=low is not None):
        loss = problem.step(model, batch, odeint)
    params = list(model.named_parameters())
    found = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, (_, p) in zip(found, params)]
    return first[0], loss.detach(), dict(zip((n for n, _ in params), grads))


def sweep_one(path: Path, factory: str, options: dict, out: Path, **settings) -> ra.SweepResult:
    """One configuration of the example by default: torchdiffeq rk4, n_timesteps 4, float16 without scaling."""
    grid = {"timesteps": [4], "method": "rk4", "library": "torchdiffeq", "dtype": "float16", "scaling": "none"}
    return ra.sweep(
        model=f"{path}:{factory}",
        options=options,
        out=out,
        progress=False,
        report=False,
        **(grid | {"noise_batches": 0} | settings),
    )


def test_the_cnf_examples_rows_equal_a_float16_run_of_its_step_written_with_torchdiffeq(tmp_path):
    result = sweep_one(CNF, "cnf", CNF_OPTIONS, tmp_path / "cnf")
    row = result.results.iloc[0]
    assert (row["status"], row["loss_in"], row["t0"], row["t1"]) == ("ok", "autocast", 10.0, 0.0)
    problem = _seeded(lambda: load_example(CNF).cnf(**CNF_OPTIONS))
    low, high = torchdiffeq_step_run(problem, 4, torch.float16), torchdiffeq_step_run(problem, 4, None)
    expected = {
        "final_rel_err": rel_err(low[0][-1], high[0][-1]),
        "loss_rel_err": rel_err(low[1], high[1]),
        "grad_params_rel_err": rel_err(flat(low[2].values()), flat(high[2].values())),
    }
    for column, value in expected.items():
        assert row[column] == pytest.approx(value, rel=1e-6), column
    # The batch is not differentiated (ProblemCopies.differentiates_batch): no input gradient is measured.
    assert pd.isna(row["grad_y0_rel_err"]) and pd.isna(row["reference_grad_y0_norm"])
    # Each part of the (z, log-density) state on its own.
    parts = result.part_errors.set_index(["metric", "part"])["rel_err"]
    for index, columns in enumerate((slice(0, 128), slice(128, 192))):
        final = rel_err(low[0][-1, columns], high[0][-1, columns])
        assert parts[("final_rel_err", f"state[{index}]")] == pytest.approx(final, rel=1e-6)


def test_the_latent_odes_rows_equal_a_float16_run_of_its_step_written_with_torchdiffeq(tmp_path):
    result = sweep_one(LATENT, "latent_ode", LATENT_OPTIONS, tmp_path / "latent")
    row = result.results.iloc[0]
    problem = _seeded(lambda: load_example(LATENT).latent_ode(**LATENT_OPTIONS))
    times = problem.sample_batch(0)[0]
    assert (row["t0"], row["t1"]) == (pytest.approx(float(times[0])), pytest.approx(float(times[-1])))
    low, high = torchdiffeq_step_run(problem, 4, torch.float16), torchdiffeq_step_run(problem, 4, None)
    assert row["final_rel_err"] == pytest.approx(rel_err(low[0][-1], high[0][-1]), rel=1e-6)
    assert pd.isna(row["grad_y0_rel_err"])
    assert row["grad_params_rel_err"] == pytest.approx(rel_err(flat(low[2].values()), flat(high[2].values())), rel=1e-6)
    # Every parameter is measured, the encoder's and the decoder's too, and each top-level submodule on its own.
    measured = result.param_errors.set_index("parameter")["grad_rel_err"]
    for name in low[2]:
        assert measured[name] == pytest.approx(rel_err(low[2][name], high[2][name]), rel=1e-6), name
    assert {"encoder.cell.weight", "decoder.2.bias"} <= set(measured.index)
    assert not any(name.startswith("batch") for name in measured.index)
    parts = result.part_errors.set_index(["metric", "part"])["rel_err"]
    for part in ("encoder", "func", "decoder"):
        names = [n for n in low[2] if n.startswith(f"{part}.")]
        expected = rel_err(flat(low[2][n] for n in names), flat(high[2][n] for n in names))
        assert parts[("grad_params_rel_err", part)] == pytest.approx(expected, rel=1e-6), part


def loop_of(code: str) -> str:
    """The answer's code without the lines that build the sweep's model, its batches and an optimizer (from
    `problem = ` to `max_norm = `) or set torch's threads: its imports and its loop, to run on a model of the test's."""
    lines = code.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("problem = "))
    end = next(i for i, line in enumerate(lines) if line.startswith("max_norm = "))
    return "\n".join(line for line in lines[:start] + lines[end + 1 :] if not line.startswith("torch.set_num_threads"))


def _seeded(make):
    """What a factory builds after the sweep's torch.manual_seed(seed) (seed 0)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make()


def test_a_tuple_state_runs_in_every_library_that_is_installed(tmp_path):
    libraries = [name for name in ("native", "torchdiffeq", "torchdiffeq-adjoint", "torchode") if name in LIBRARIES]
    result = sweep_one(CNF, "cnf", CNF_OPTIONS, tmp_path / "all", library=libraries, scaling=["none"])
    table = result.results
    assert set(table["library"]) == set(libraries)
    assert (table["status"] == "ok").all(), table[["library", "failure_message"]]
    assert (table[["t0", "t1"]].to_numpy() == [10.0, 0.0]).all()
    parts = result.part_errors
    assert set(parts["part"]) == {"state[0]", "state[1]"} and set(parts["library"]) == set(libraries)


def test_the_answer_writes_the_users_step_span_and_steps_and_its_code_is_the_run_it_measured(tmp_path):
    result = sweep_one(
        LATENT, "latent_ode", LATENT_OPTIONS, tmp_path / "code", library="native", timesteps=[4, 8], noise_batches=4
    )
    answer = result.answers["float16"]
    code = answer["code"]
    assert answer["train"] and "linspace(0, 1" not in code
    n = answer["n_timesteps"]
    row = result.results.set_index("n_timesteps").loc[n]
    assert f"equal_steps({n})" in code and f"t from {row['t0']:.4g} to {row['t1']:.4g}" in code
    # The code, run on the sweep's batch, gives the gradient the row measured (its error against float64).
    problem = _seeded(lambda: load_example(LATENT).latent_ode(**LATENT_OPTIONS))
    model = problem.model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    names = {"torch": torch, "model": model, "step": problem.step, "batches": [problem.sample_batch(0)]}
    exec(loop_of(code), names | {"optimizer": optimizer, "max_norm": float("inf")})
    measured = flat(p.grad for p in model.parameters())
    reference = _seeded(lambda: load_example(LATENT).latent_ode(**LATENT_OPTIONS))
    model64 = copy.deepcopy(reference.model).double()
    batch64 = tuple(b.double() for b in reference.sample_batch(0))
    from roundoff_analyzer.solvers import equal_steps, odeint

    loss = reference.step(
        model64,
        batch64,
        lambda f, y, t: odeint(f, y, t, method="rk4_classical", options=dict(grid_constructor=equal_steps(n))),
    )
    expected = flat(torch.autograd.grad(loss, list(model64.parameters())))
    assert rel_err(measured, expected) == pytest.approx(row["grad_params_rel_err"], rel=1e-6)


MAIN_SCRIPT = """
import sys
import torch
import roundoff_analyzer as ra

def decay(seed: int = 0):
    def step(model, y0, odeint):
        return odeint(lambda t, y: model(y), y0, torch.tensor([0.0, 2.0]))[-1].square().mean()

    def sample_batch(k):
        return torch.randn(64, 2, generator=torch.Generator().manual_seed(k))

    return ra.Problem(model=torch.nn.Linear(2, 2), step=step, sample_batch=sample_batch)

result = ra.sweep(model=decay, timesteps=[16, 64], out=sys.argv[1], progress=False, report=False, noise_batches=2)
print(result.manifest["execution"].get("workers_reason"), (result.results["status"] == "ok").all())
"""


def test_a_factory_defined_in_main_sweeps_with_the_executor_the_tool_picks(tmp_path):
    script = tmp_path / "notebook.py"
    script.write_text(textwrap.dedent(MAIN_SCRIPT))
    done = subprocess.run([sys.executable, script, tmp_path / "out"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("the model is defined in __main__, which worker processes cannot import True")


FLOAT32_CONSTANT = """
import torch
import roundoff_analyzer as ra

WEIGHT = torch.tensor([[0.5, 0.1], [0.0, 0.3]])  # float32, as a constant in a user's loss often is

class Field(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def forward(self, t, y):
        return self.layer(y)

def old(seed: int = 0):
    return Field(), torch.randn(8, 2), lambda trajectory: (trajectory[-1] @ WEIGHT).square().mean()

def new(seed: int = 0):
    def step(model, y0, odeint):
        return (odeint(model.func, y0, torch.tensor([0.0, 1.0]))[-1] @ WEIGHT).square().mean()
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)
        def func(self, t, y):
            return self.layer(y)
    return ra.Problem(model=Holder(), step=step, sample_batch=lambda k: torch.randn(8, 2))
"""


@pytest.mark.parametrize("factory", ["old", "new"])
def test_a_loss_that_breaks_the_float64_reference_is_one_line_before_anything_is_written(tmp_path, factory):
    source = tmp_path / "constant.py"
    source.write_text(FLOAT32_CONSTANT)
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", f"{source}:{factory}", "--timesteps", "4", "--out", out)
    assert result.exit_code == 2
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and "float64" in message and "reference" in message, message
    assert not out.exists()


DICT_BATCH = """
import torch
import roundoff_analyzer as ra

class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(3, 4)
        self.field = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
        self.head = torch.nn.Linear(4, 2)

def classifier(seed: int = 0, batches: int = 4):
    def step(model, batch, odeint):
        state = odeint(lambda t, h: model.field(h), model.embed(batch["x"]), torch.tensor([0.0, 0.5, 1.0]))
        logits = model.head(state[-1]) * batch["weight"]
        return torch.nn.functional.cross_entropy(logits.float(), batch["label"])

    def sample_batch(k):
        if k > batches:
            raise IndexError(f"only {batches} batches")
        g = torch.Generator().manual_seed(k)
        x, label = torch.randn(16, 3, generator=g), torch.randint(0, 2, (16,), generator=g)
        return {"x": x, "weight": torch.ones(16, 1), "label": label}

    return ra.Problem(model=Classifier(), step=step, sample_batch=sample_batch)
"""


def test_a_dict_batch_with_labels_measures_its_floating_inputs_and_a_sampler_that_ends_bounds_the_noise(tmp_path):
    source = tmp_path / "classifier.py"
    source.write_text(DICT_BATCH)
    result = ra.sweep(
        model=f"{source}:classifier",
        timesteps=[4],
        method="rk4",
        library="native",
        dtype="bfloat16",
        scaling="none",
        out=tmp_path / "out",
        progress=False,
        report=False,
        noise_batches=8,
    )
    row = result.results.iloc[0]
    assert row["status"] == "ok" and row["loss_in"] == "autocast"
    assert {"embed.weight", "head.bias"} <= set(result.param_errors["parameter"])
    # The batch is handed as training hands it: none of its tensors requires grad, none is measured.
    assert not any(name.startswith("batch") for name in result.param_errors["parameter"])
    assert row["grad_noise_batches"] == 4  # batches 1 … 4: the sampler has no fifth
    assert (result.part_errors.query("metric == 'grad_params_rel_err'")["part"].tolist()) == ["embed", "field", "head"]


def test_a_folder_from_before_the_span_was_recorded_reads_it_as_zero_to_one():
    baseline = ra.load(REPO / "reports" / "baselines" / "otflow-ci")
    assert (baseline.results["t0"] == 0.0).all() and (baseline.results["t1"] == 1.0).all()
    assert baseline.part_errors is None


def test_training_a_step_trains_every_parameter_of_its_model(tmp_path):
    out = tmp_path / "train"
    result = run_cli(
        "train",
        "--model",
        f"{LATENT}:latent_ode",
        *(x for k, v in LATENT_OPTIONS.items() for x in ("-o", f"{k}={v}")),
        "--iters",
        "2",
        "--dtype",
        "float32,float16",
        "--scaling",
        "none",
        "--timesteps",
        "4",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    initial = _seeded(lambda: load_example(LATENT).latent_ode(**LATENT_OPTIONS)).model.state_dict()
    trained = torch.load(sorted((out).rglob("iter_*2.pt"))[-1], weights_only=True)
    trained = trained.get("func_state_dict", trained)
    moved = {name for name, value in trained.items() if not torch.equal(value, initial[name])}
    assert {"encoder.cell.weight", "func.net.0.weight", "decoder.2.weight"} <= moved


@pytest.mark.parametrize(
    "path, factory, options, field",
    [(LATENT, "latent_ode", LATENT_OPTIONS, "func.net.0"), (CNF, "cnf", CNF_OPTIONS, "hyper.0")],
)
def test_per_module_watches_every_module_of_the_model_its_encoder_and_decoder_too(
    tmp_path, path, factory, options, field
):
    result = sweep_one(path, factory, options, tmp_path / "modules", library="native", per_module=True)
    modules = result.modules.set_index(["module", "phase"])
    rows = result.results
    assert (rows["status"] == "ok").all()
    # The vector field's layers are called at every stage of every step (4 steps of rk4), forward and backward.
    assert modules.loc[(field, "forward"), "n_calls"] == modules.loc[(field, "backward"), "n_calls"] == 16
    assert (modules["measurement"] == "complete").all()
    assert modules["local_rel_err"].notna().all()
    if factory == "latent_ode":  # the encoder and the decoder run outside the solve: once each, no time step
        for module in ("encoder.read_out", "decoder.2"):
            assert modules.loc[(module, "forward"), "n_calls"] == 1
        assert {"encoder.cell", "decoder.0"} <= {name for name, _ in modules.index}
    assert "Each module of the model was watched" in result.write_report().read_text()
