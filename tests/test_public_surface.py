"""The public surface: every name the public modules declare in `__all__` exists, and a value registered through
`roundoff_analyzer.plugins` is one a sweep and the native solver run, as a built-in is."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest

PUBLIC_MODULES = ("roundoff_analyzer", "roundoff_analyzer.solvers", "roundoff_analyzer.plugins")


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_in_all_resolves(name):
    module = importlib.import_module(name)
    assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
    missing = [attribute for attribute in module.__all__ if getattr(module, attribute, None) is None]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


def test_the_package_names_what_a_user_calls_and_catches():
    import roundoff_analyzer as ra
    from roundoff_analyzer.core.errors import InputError

    assert {"sweep", "load", "train", "SweepResult", "TrainResult", "keep_float32", "InputError", "__version__"} <= set(
        ra.__all__
    )
    assert ra.InputError is InputError and issubclass(ra.SweepInterrupted, Exception)
    assert callable(ra.watch) and issubclass(ra.RoundoffWarning, UserWarning) and "Watch" in ra.__all__
    assert set(ra.__all__) <= set(dir(ra))
    with pytest.raises(AttributeError, match="no attribute 'sweeep'"):
        ra.sweeep  # noqa: B018


def test_the_plugins_module_registers_into_the_registries_the_sweep_reads():
    from roundoff_analyzer import plugins
    from roundoff_analyzer.axes.methods import METHODS
    from roundoff_analyzer.axes.models import MODELS

    assert plugins.register_method.__self__ is METHODS and plugins.register_model.__self__ is MODELS
    registers = [name for name in plugins.__all__ if name.startswith("register_")]
    assert len(registers) == 13 and all(callable(getattr(plugins, name)) for name in registers)


def test_a_registry_is_read_by_name_as_a_mapping_is():
    from roundoff_analyzer import plugins
    from roundoff_analyzer.core.errors import InputError

    assert plugins.MODELS["otflow"] is plugins.MODELS.get("otflow") and plugins.METHODS["rk4"].name == "rk4"
    with pytest.raises(InputError, match="unknown model 'otflwo'; known: .*otflow"):
        plugins.MODELS["otflwo"]


# Runs in a process of its own: the values it registers must not reach the registries of the other tests.
PLUGIN_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import roundoff_analyzer as ra
    from roundoff_analyzer.execution.local import LocalExecutor
    from roundoff_analyzer.plugins import (
        ExplicitRK, ModelOptions, TrajectoryProblem, register_executor, register_method, register_model,
    )
    from roundoff_analyzer.solvers import odeint


    class DecayOptions(ModelOptions):
        rate: float = 1.5
        batch: int = 4


    class Decay(torch.nn.Module):
        def __init__(self, rate):
            super().__init__()
            self.rate = torch.nn.Parameter(torch.tensor(rate))

        def forward(self, t, y):
            return -self.rate * y


    class DecayModel:
        name = "decay"
        description = "dy/dt = -rate y, one learned rate"
        options_type = DecayOptions
        default_data = None

        def build(self, options, device, data=None):
            y0 = torch.linspace(0.5, 2.0, options.batch, device=device).reshape(-1, 1)
            return TrajectoryProblem(func=Decay(options.rate).to(device), y0=y0,
                                     loss=lambda trajectory: trajectory[-1].square().mean(),
                                     data_source="generated in code")


    class CountingExecutor(LocalExecutor):  # the local executor under another name, counting its runs
        name = "counting"
        runs = 0

        def run(self, execution):
            CountingExecutor.runs += 1
            return super().run(execution)


    register_model(DecayModel())
    register_executor(CountingExecutor())
    register_method(
        ExplicitRK("ralston2", a=((), (2 / 3,)), b=(0.25, 0.75), c=(0.0, 2 / 3), description="Ralston, order 2")
    )

    func, y0 = Decay(1.0), torch.ones(1, 1, dtype=torch.float64)
    t = torch.linspace(0.0, 1.0, 33, dtype=torch.float64)
    final = odeint(func.double(), y0, t, method="ralston2")[-1].item()
    print("odeint", abs(final - torch.exp(torch.tensor(-1.0)).item()) < 1e-4)

    result = ra.sweep(model="decay", method="ralston2", library="native", dtype="bfloat16", scaling="none",
                      timesteps=[4], executor="counting", device="cpu", noise_batches=0, out=sys.argv[1], report=False,
                      progress=False)
    rows = result.results
    print("sweep", len(rows), sorted(set(rows["model"])), sorted(set(rows["method"])), sorted(set(rows["status"])))
    print("executor", CountingExecutor.runs, result.manifest["execution"]["executor"])
    """
)


def test_a_model_a_method_and_an_executor_registered_through_the_plugins_module_run_a_sweep(tmp_path):
    script = tmp_path / "register.py"
    script.write_text(PLUGIN_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "sweep")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "odeint True"
    assert lines[1] == "sweep 1 ['decay'] ['ralston2'] ['ok']", out.stdout
    assert lines[2] == "executor 1 counting", out.stdout
