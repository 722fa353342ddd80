"""A model whose own modules call torchdiffeq, swept as public code is written: during each step, torchdiffeq's `odeint`
and `odeint_adjoint` are answered by the library under test under every name a module imported them as, and given back
afterwards; the manifest, the report and the answer's code say where the solves came from. The example's rows are
checked against computations written here, with each solver called directly."""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import os
import re
import signal
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchdiffeq

import roundoff_analyzer as ra
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.modes import PreparedRun, ProblemCopies
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.core.user_code import load_attribute
from roundoff_analyzer.measuring import torchdiffeq_routing
from roundoff_analyzer.measuring.failures import ConfigurationTimeout
from roundoff_analyzer.measuring.one_run import step_forward
from roundoff_analyzer.measuring.run_spec import RunSpec
from roundoff_analyzer.measuring.solve_calls import ConfiguredOdeint
from roundoff_analyzer.measuring.time_limit import time_limit
from roundoff_analyzer.measuring.torch_state import restored_torch_state
from roundoff_analyzer.solvers import odeint as native_odeint
from roundoff_analyzer.solvers import torchdiffeq_calls

from .test_step_problems import _seeded, flat, rel_err

REPO = Path(__file__).resolve().parents[1]
FACTORY = REPO / "examples" / "odeblock.py"
MODELS = REPO / "examples" / "odeblock_models.py"
OPTIONS = {"batch": 16, "hidden": 8}


def _sweep(model: str, out: Path, **settings) -> ra.SweepResult:
    grid = {"timesteps": [4], "method": "euler", "library": ["native", "torchdiffeq"], "dtype": "float16"}
    return ra.sweep(
        model=model,
        out=out,
        progress=False,
        **(grid | {"scaling": "none", "noise_batches": 0, "executor": "local"} | settings),
    )


def _direct_run(problem, solver, n_timesteps: int, low: torch.dtype | None):
    """The example's step written out with `solver` called on its vector field directly, on n equal Euler steps: the
    final state, the loss and the gradient of every parameter (the batch requires no grad, as training hands it)."""
    dtype = torch.float64 if low is None else torch.float32
    model = copy.deepcopy(problem.model).to(dtype)
    x, labels = problem.sample_batch(0)
    x = x.to(dtype)
    grid = torch.linspace(0, 1, n_timesteps + 1, dtype=dtype)
    with torch.autocast("cpu", dtype=low or torch.float16, enabled=low is not None):
        final = solver(model.odeblock.odefunc, x, grid, method="euler")[-1]
        loss = torch.nn.functional.cross_entropy(model.head(final), labels)
    names, params = zip(*model.named_parameters())
    grads = torch.autograd.grad(loss, params)
    return final.detach(), loss.detach(), dict(zip(names, grads))


def test_a_public_odeblock_model_is_swept_unchanged_and_its_rows_equal_each_solver_called_directly(tmp_path):
    odenet = load_attribute("model", f"{FACTORY}:odenet", "a file")[2]  # as the sweep loads it
    factory_source = inspect.getsource(odenet)
    assert len([line for line in factory_source.splitlines() if line.strip()]) <= 10
    assert not re.search(r"\.\s*odeint\w*\s*=", FACTORY.read_text())  # nothing assigned into the model's module
    assert "from torchdiffeq import odeint\n" in MODELS.read_text() and "import roundoff" not in MODELS.read_text()

    result = _sweep(f"{FACTORY}:odenet", tmp_path / "odenet", options=OPTIONS)
    table = result.results.set_index("library")
    assert (table["status"] == "ok").all(), table["failure_message"]
    assert result.manifest["problem"]["routed"] == [
        {"module": "odeblock_models", "name": "odeint", "function": "odeint", "solves": 1, "caller": None}
    ]
    problem = _seeded(lambda: odenet(**OPTIONS))
    measured = result.param_errors.set_index(["library", "parameter"])["grad_rel_err"]
    for library, solver in (("native", native_odeint), ("torchdiffeq", torchdiffeq.odeint)):
        low, high = _direct_run(problem, solver, 4, torch.float16), _direct_run(problem, solver, 4, None)
        row = table.loc[library]
        assert row["final_rel_err"] == pytest.approx(rel_err(low[0], high[0]), rel=1e-6), library
        assert row["loss_rel_err"] == pytest.approx(rel_err(low[1], high[1]), rel=1e-6), library
        assert pd.isna(row["grad_y0_rel_err"]), library  # a step's batch is not differentiated
        expected = rel_err(flat(low[2].values()), flat(high[2].values()))
        assert row["grad_params_rel_err"] == pytest.approx(expected, rel=1e-6), library
        for name in low[2]:  # every parameter, the vector field's inside the ODEBlock and the head's
            assert measured[(library, name)] == pytest.approx(rel_err(low[2][name], high[2][name]), rel=1e-6)
    assert {"odeblock.odefunc.net.0.weight", "head.bias"} <= set(measured.index.get_level_values("parameter"))
    report = (tmp_path / "odenet" / "report.md").read_text()
    assert (
        "# odeblock_models.py: its `from torchdiffeq import odeint` stands; answered_by answers it with solve" in report
    )
    assert "1 through `odeblock_models.odeint` (`from torchdiffeq import odeint`)" in report


def _write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:factory"


_HEADER = """
    import torch
    from torch import nn
    import roundoff_analyzer as ra
    {imports}

    def factory(seed: int = 0):
        model = nn.Linear(2, 2)

        def step(model, batch, handed):
            {body}

        return ra.Problem(model=model, step=step, sample_batch=lambda k: torch.randn(8, 2))
"""


def test_odeint_adjoint_imported_as_odeint_is_routed_and_the_answer_says_its_line_stands(tmp_path):
    spec = _write(
        tmp_path,
        "adjoint_style",
        _HEADER.format(
            imports="from torchdiffeq import odeint_adjoint as odeint",
            body="return odeint(lambda t, y: model(y), batch, torch.tensor([0.0, 1.0]), method='dopri5')[-1].sum()",
        ),
    )
    result = _sweep(spec, tmp_path / "out", library="native", dtype="bfloat16", timesteps=[4, 8], noise_batches=2)
    assert (result.results["status"] == "ok").all()
    assert result.manifest["problem"]["routed"] == [
        {"module": "adjoint_style", "name": "odeint", "function": "odeint_adjoint", "solves": 1, "caller": None}
    ]
    report = (tmp_path / "out" / "report.md").read_text()
    assert (
        "# adjoint_style.py: its `from torchdiffeq import odeint_adjoint as odeint` stands; answered_by answers it "
        "with solve" in report
    )
    module = sys.modules["roundoff_user_adjoint_style"]
    assert module.odeint is torchdiffeq.odeint_adjoint  # given back after the sweep


@pytest.mark.slow
def test_a_models_own_odeint_adjoint_is_measured_in_the_torchdiffeq_rows_by_torchdiffeqs_adjoint(tmp_path):
    """A routed `odeint_adjoint` call in the torchdiffeq rows was answered by torchdiffeq's `odeint` (backpropagation
    through the steps): it is answered by its adjoint form, so its rows equal those of the same model handing its
    solve to the step's `odeint` under torchdiffeq-adjoint; the manifest keeps the call's adjoint tolerances."""
    solve = (
        "(lambda t, y: model(y), batch, torch.tensor([0.0, 1.0]), method='dopri5', adjoint_rtol=1e-4, "
        "adjoint_atol=1e-5)"
    )
    # The same batch in every sweep (the header's draws from torch's global generator).
    header = _HEADER.replace("torch.randn(8, 2)", "torch.randn(8, 2, generator=torch.Generator().manual_seed(k))")
    own = _write(
        tmp_path,
        "own_adjoint",
        header.format(imports="from torchdiffeq import odeint_adjoint", body=f"return odeint_adjoint{solve}[-1].sum()"),
    )
    handed = _write(tmp_path, "handed_adjoint", header.format(imports="", body=f"return handed{solve}[-1].sum()"))
    settings = {"dtype": ["float16", "bfloat16"], "method": "rk4", "timesteps": [4]}
    routed = _sweep(own, tmp_path / "own", library="torchdiffeq", **settings)
    direct = _sweep(handed, tmp_path / "handed", library="torchdiffeq-adjoint", **settings)
    columns = ["sol_rel_err", "grad_params_rel_err"]
    assert (routed.results["status"] == "ok").all(), routed.results["failure_message"]
    assert routed.results[columns].to_numpy().tolist() == direct.results[columns].to_numpy().tolist()
    backprop = _sweep(handed, tmp_path / "backprop", library="torchdiffeq", **settings)
    assert routed.results["grad_params_rel_err"].tolist() != backprop.results["grad_params_rel_err"].tolist()
    named = routed.manifest["problem"]["solver_arguments"]
    assert (named["adjoint_rtol"], named["adjoint_atol"]) == (1e-4, 1e-5)
    report = (tmp_path / "own" / "report.md").read_text()
    assert "an `odeint_adjoint` call by torchdiffeq-adjoint in the torchdiffeq rows" in report


@pytest.mark.parametrize(
    ("imports", "body", "words"),
    [
        ("", "return model(batch).sum()", "the step called no solver"),
        (
            "SOLVER = {'solve': __import__('torchdiffeq').odeint}",
            "return SOLVER['solve'](lambda t, y: model(y), batch, torch.tensor([0.0, 1.0]))[-1].sum()",
            "the step called torchdiffeq's odeint through a reference the sweep cannot route",
        ),
    ],
)
def test_a_step_that_calls_no_solver_or_torchdiffeq_where_it_cannot_be_routed_is_refused_in_one_line(
    tmp_path, imports, body, words
):
    spec = _write(tmp_path, f"refused_{len(imports)}", _HEADER.format(imports=imports, body=body))
    with pytest.raises(InputError, match=re.escape(words)) as refused:
        _sweep(spec, tmp_path / "out")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_torchdiffeqs_names_are_given_back_when_the_step_raises(tmp_path):
    spec = _write(
        tmp_path,
        "raising_step",
        _HEADER.format(
            imports="from torchdiffeq import odeint",
            body="odeint(lambda t, y: model(y), batch, torch.tensor([0.0, 1.0]))\n            raise ValueError('late')",
        ),
    )
    defining = sys.modules["torchdiffeq._impl.odeint"]
    function, checks = defining.odeint, defining._check_inputs
    with pytest.raises(InputError, match="late"):
        _sweep(spec, tmp_path / "out")
    assert sys.modules["roundoff_user_raising_step"].odeint is function
    assert torchdiffeq.odeint is function and defining.odeint is function and defining._check_inputs is checks


def _alarm_at_line(k: int, traced):
    """A trace function sending this process SIGALRM at the k-th line run in the code `traced(code)` picks, as a time
    limit's alarm lands wherever the run is; and whether it was sent."""
    seen, sent = 0, []

    def local(frame, event, arg):
        nonlocal seen
        if event == "line":
            seen += 1
            if seen == k:
                sent.append(k)
                os.kill(os.getpid(), signal.SIGALRM)
        return local

    return (lambda frame, event, arg: local if traced(frame.f_code) else None), sent


def _odeblock_run() -> RunSpec:
    odenet = load_attribute("model", f"{FACTORY}:odenet", "a file")[2]
    problem = _seeded(lambda: odenet(batch=4, hidden=4))
    copies = ProblemCopies(problem)
    prepared = PreparedRun(problem.model, copies.batch, nullcontext)
    return RunSpec(prepared, copies, LIBRARIES.get("native"), METHODS.get("euler"), 2)


def _alarms_at_each_line(run: RunSpec, traced, rescan: bool = False, most: int | None = None) -> int:
    """The run's step under a time limit, with the alarm sent at its first, second, ... traced line in turn, until a
    step runs through with none left (or at `most` lines); after each, nothing may be left routed or held back. The
    number of lines."""
    defining = sys.modules["torchdiffeq._impl.odeint"]
    models = sys.modules["odeblock_models"]
    originals = (torchdiffeq.odeint, torchdiffeq.odeint_adjoint, defining._check_inputs)
    outer = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # an alarm still pending after the limit ends is dropped
    try:
        for k in itertools.count(1) if most is None else range(1, most + 1):
            trace, sent = _alarm_at_line(k, traced)
            if rescan:
                # The modules' globals looked through again, as after an import.
                torchdiffeq_calls._scanned = (-1, None, [])
            try:
                with restored_torch_state(), time_limit(600):  # as every run of a sweep
                    sys.settrace(trace)
                    try:
                        step_forward(run, ConfiguredOdeint(run))
                    finally:
                        sys.settrace(None)
            except ConfigurationTimeout:
                assert sent, k
            else:
                assert not sent, f"the alarm sent at line {k} raised nothing"
            assert (torchdiffeq.odeint, torchdiffeq.odeint_adjoint, defining._check_inputs) == originals, k
            assert models.odeint is torchdiffeq.odeint and defining.odeint is torchdiffeq.odeint, k
            assert signal.SIGALRM not in signal.pthread_sigmask(signal.SIG_BLOCK, ()), k
            assert signal.SIGALRM not in signal.sigpending(), k
            if not sent:
                return k - 1
    finally:
        signal.signal(signal.SIGALRM, outer)
    return k


POSIX_ALARM = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="a configuration's time limit is POSIX's SIGALRM"
)


@POSIX_ALARM
def test_an_alarm_at_any_line_of_the_routing_is_a_timeout_that_leaves_no_name_routed_and_no_alarm_held_back():
    """A time limit's alarm that landed while torchdiffeq's names were being set or given back once left them routed
    for every later run in the process (CI: 135 tests of other files failed). The alarm is sent at each line the
    routing and the context managers around the step run, in turn (the scan of the modules, already done, apart)."""
    run = _odeblock_run()
    step_forward(run, ConfiguredOdeint(run))  # the modules scanned once, as in a sweep's every later run
    files = {torchdiffeq_routing.__file__, torchdiffeq_calls.__file__, contextlib.__file__}
    lines = _alarms_at_each_line(run, lambda code: code.co_filename in files and code.co_name != "_scan")
    assert lines > 20  # the routing's lines were reached: it set the names, routed a solve and gave them back


@POSIX_ALARM
def test_an_alarm_while_the_modules_are_scanned_is_a_timeout_not_an_error_swallowed_on_the_way():
    """The scan of the modules' globals passes over what it cannot read with `except Exception`: an alarm landing
    there was swallowed and the run went on past its limit. A timeout is no Exception, as KeyboardInterrupt is not."""
    # The scan runs a few lines per loaded module: its first 40 land in its `try` a dozen times.
    assert _alarms_at_each_line(_odeblock_run(), lambda code: code.co_name == "_scan", rescan=True, most=40) == 40
