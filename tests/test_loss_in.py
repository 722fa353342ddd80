"""Where the loss is formed (the loss_in axis), the answer's code against the rows it came from, an error larger
than its quantity, and the answer as data from Python (with the model given as a function)."""

from __future__ import annotations

import copy
import re
import warnings

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

import roundoff_analyzer as ra
from roundoff_analyzer.axes.grid import Grid
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.judging.answer import Answer, answers
from roundoff_analyzer.judging.verdict import UNSAFE, judge_setups, verdicts
from roundoff_analyzer.report.sections.answer_code import code_lines, code_method
from roundoff_analyzer.report.sections.model_code import measured_model_code
from roundoff_analyzer.report.sections.verdict import describe
from roundoff_analyzer.storage.results import read_parquet

from .conftest import run_cli

TINY = {"d": 3, "hidden": 8, "batch": 16}
# OT-Flow at BSDS300's dimension: its loss (about 2e5) is beyond float16's largest value, its gradients are not.
LOUD_LOSS = {**TINY, "d": 63}


def quiet_sweep(tmp_path, name, **settings):
    return ra.sweep(
        **{
            "model": "otflow",
            "options": TINY,
            "device": "cpu",
            "method": "euler",
            "out": tmp_path / name,
            "report": False,
            "progress": False,
            **settings,
        }
    )


def test_the_placements_are_an_axis_of_their_own(tmp_path):
    result = quiet_sweep(
        tmp_path,
        "both",
        options=LOUD_LOSS,
        timesteps=[2],
        library=["native-low", "torchdiffeq"],
        dtype="float16",
        scaling="none",
        loss_in=["float32", "autocast"],
        noise_batches=0,
    )
    rows = result.results.set_index(["library", "loss_in"])
    assert len(rows) == 4 and set(result.results["loss_in"]) == {"float32", "autocast"}
    # The native solver's low-precision trajectory: the loss formed from it inside autocast leaves float16's range;
    # formed in float32 from the same trajectory it does not.
    inside = rows.loc[("native-low", "autocast")]
    assert inside["status"] == "failed" and inside["failure_class"] == "overflow"
    assert "non-finite loss (formed inside autocast)" in inside["failure_message"]
    assert rows.loc[("native-low", "float32"), "status"] == "ok"
    # torchdiffeq returns float32 states, and OT-Flow's loss has no matrix product: the two placements agree bit for
    # bit.
    assert (
        rows.loc[("torchdiffeq", "autocast"), "grad_params_rel_err"]
        == rows.loc[("torchdiffeq", "float32"), "grad_params_rel_err"]
    )
    fingerprint = result.manifest["fingerprint"]
    assert fingerprint["grid"]["loss_in"] == ["float32", "autocast"]
    assert "2 loss placements" in result.manifest["grid"]["description"]
    # The default placement leaves a grid's description (a version-1 fingerprint's) as it was before the axis.
    default = Grid.build((8,), ("euler",), ("autocast",))
    assert default.describe() == Grid.build((8,), ("euler",), ("autocast",), loss_ins=["float32"]).describe()
    assert "loss" not in default.describe() and default.configurations("otflow")[0].loss_in == "float32"
    shown = run_cli("show", result.folder, "--where", "loss_in == 'autocast'", columns=200).stdout
    assert "loss in autocast" in shown and "overflow" in shown  # the caption names the placement every row shares
    # a column beside the mode
    assert re.search(r"loss in\s+status", run_cli("show", result.folder, columns=200).stdout)
    listed = run_cli("list", columns=200).stdout
    assert re.search(r"loss_in\s+│?\s*autocast", listed) and re.search(r"loss_in\s+│?\s*float32", listed)
    refused = run_cli("sweep", "--model", "otflow", "--loss-in", "float16", "--out", tmp_path / "never")
    assert refused.exit_code == 2 and "unknown loss placement 'float16'; allowed: float32, autocast" in refused.output


def test_rows_written_before_the_axis_read_as_float32(tmp_path):
    result = quiet_sweep(
        tmp_path, "old", timesteps=[2], library="torchdiffeq", dtype="float16", scaling="none", noise_batches=0
    )
    table = pq.read_table(result.folder / "results.parquet")
    old = table.drop_columns(["loss_in"])
    pq.write_table(old, tmp_path / "old.parquet")
    read = read_parquet(tmp_path / "old.parquet")
    assert (read["loss_in"] == "float32").all()
    # Judged without the column at all, as a hand-made table would be.
    assert {v.loss_in for v in verdicts(old.to_pandas())} == {"float32"}


def _code_against_rows(code: list[str], a: Answer, results: pd.DataFrame) -> None:
    """The code block says what the answer's rows ran: the library, method, n_timesteps, mode, scaling and loss
    placement."""
    text = "\n".join(code)
    ran = results[
        (results["dtype"] == a.dtype)
        & (results["library"] == a.library)
        & (results["scaling"] == a.scaling)
        & (results["mode"] == a.mode)
        & (results["loss_in"] == a.loss_in)
        & (results["method"] == a.method)
        & (results["status"] == "ok")
    ]
    steps = int(re.search(r"torch\.linspace\(0, 1, (\d+)\)", text).group(1)) - 1
    assert steps in set(ran["n_timesteps"]), "the code solves on a grid its rows ran"
    assert f'method="{code_method(a.library, a.method)}"' in text
    assert ("from roundoff_analyzer.solvers import odeint" in text) == (a.library in ("native", "native-low"))
    solve = next(i for i, line in enumerate(code) if "odeint(func" in line)
    loss = next(i for i, line in enumerate(code) if line.lstrip().startswith("loss = "))
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    if a.mode == "pure":
        assert (
            f"func = func.to(torch.{a.dtype})" in text and "torch.autocast" not in text and "optimizer.step" not in text
        )
    else:
        assert f'with torch.autocast("cpu", dtype=torch.{a.dtype}' in text
        assert ("cache_enabled=False" in text) == (a.mode == "autocast-nocache")
        # Inside the autocast block (as indented as the solve) or after it.
        assert (indent(code[loss]) == indent(code[solve])) == (a.loss_in == "autocast")
    assert (".float()" in code[loss]) == (a.loss_in == "float32")
    assert ("DynamicAdjointScaler()" in text) == (a.scaling == "dynamic")
    if a.scaling == "grad":
        order = ["GradScaler(", "for y0 in batches", "scaler.scale(loss).backward()"]
        if a.mode != "pure":
            order += ["scaler.unscale_(optimizer)", "clip_grad_norm_", "scaler.step(optimizer)", "scaler.update()"]
        at = [next(i for i, line in enumerate(code) if step in line) for step in order]
        assert at == sorted(at), (
            f"GradScaler before the loop, then scale, backward, unscale_, clip, step, update: {code}"
        )
    else:
        assert "GradScaler" not in text


@pytest.mark.parametrize(
    "setup",
    [
        {"library": "native", "scaling": "dynamic", "mode": "autocast", "loss_in": "autocast"},
        {"library": "torchdiffeq", "scaling": "grad", "mode": "autocast-nocache", "loss_in": "float32"},
        {
            "library": "torchdiffeq",
            "scaling": "none",
            "mode": "pure",
            "loss_in": "autocast",
        },  # (GradScaler refuses float16 weights)
    ],
    ids=lambda s: "-".join(s.values()),
)
def test_the_answers_code_is_what_its_rows_ran(tmp_path, setup):
    result = quiet_sweep(
        tmp_path, "answer", timesteps=[2, 4], dtype="float16", noise_batches=2, **{k: [v] for k, v in setup.items()}
    )
    (a,) = answers(result.results)
    assert a.train, a.judgement
    assert (a.library, a.scaling, a.mode, a.loss_in) == tuple(setup.values())
    code = code_lines(a, "cpu", result.manifest["problem"], measured_model_code(result.manifest, result.results))
    _code_against_rows(code, a, result.results)
    assert (
        result.answers["float16"]["code"] == "\n".join(code)
        and result.answers["float16"]["loss_in"] == setup["loss_in"]
    )


def test_both_placements_measured_the_answer_says_which_and_why(tmp_path):
    result = quiet_sweep(
        tmp_path,
        "which",
        options=LOUD_LOSS,
        timesteps=[2, 4],
        library="native-low",
        dtype="float16",
        scaling="none",
        loss_in=["autocast", "float32"],
        noise_batches=2,
    )
    (a,) = answers(result.results)
    assert a.train and a.loss_in == "float32" and a.other_placement is not None and a.other_placement.label == UNSAFE
    _code_against_rows(code_lines(a, "cpu"), a, result.results)
    answer = result.answers["float16"]
    assert answer["placement"].startswith(
        "Form the loss in float32, outside autocast: formed inside autocast, the same setup is unsafe"
    )


def test_an_error_larger_than_its_quantity_is_unsafe_whatever_yardstick_is_missing(tmp_path):
    result = quiet_sweep(
        tmp_path, "large", timesteps=[2], library="native", dtype="float16", scaling="none", noise_batches=0
    )
    (before,) = judge_setups(result.results)
    assert before.label != UNSAFE and not before.noise_known  # no gradient noise: no yardstick for training
    results = result.results.assign(grad_params_rel_err=2.08)
    (judged,) = judge_setups(results)
    assert (
        judged.label == UNSAFE
        and judged.mostly_error.value == 2.08
        and judged.mostly_error.quantity == "parameter gradient"
    )
    (verdict,) = ra.load(result.folder).verdicts  # the folder's own verdict, as data
    assert verdict["label"] == before.label and verdict["mostly_error"] is None
    assert describe(judged).startswith(
        "the parameter gradient error reaches 208% (euler n = 2): more error than parameter gradient"
    )


def tiny_factory(hidden: int = 4, seed: int = 0):
    """A linear field with a small tanh correction; the loss is the mean square of the final state."""
    func = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    class Field(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = func

        def forward(self, t, y):
            return self.net(y)

    y0 = torch.randn(8, 2, generator=torch.Generator().manual_seed(seed))
    return Field(), y0, lambda trajectory: (trajectory[-1] ** 2).mean()


def test_a_model_given_as_its_factory_function_is_recorded_by_module_name_and_digest(tmp_path):
    result = ra.sweep(
        model=tiny_factory,
        options={"hidden": 3},
        timesteps=[2],
        method="euler",
        library="torchdiffeq",
        dtype="float16",
        scaling="none",
        device="cpu",
        out=tmp_path / "own",
        report=False,
        progress=False,
    )
    name = f"{__name__}:tiny_factory"
    assert result.manifest["model"]["name"] == name and (result.results["model"] == name).all()
    assert re.fullmatch(r"[0-9a-f]{64}", result.manifest["settings"]["user_code"][name])
    assert (result.results["status"] == "ok").all()
    with pytest.raises(InputError, match="not defined at the top level of a module"):
        ra.sweep(model=lambda: None, out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("mode", ["autocast", "pure"])
def test_float32s_answer_is_plain_float32_code_that_runs_as_measured_without_a_warning(tmp_path, mode):
    """float32 computes in float32 whatever the mode: its answer names no autocast and no cast, sets its cost against
    nothing (it is what the others are set against), and its code, run with every warning an error, gives the
    gradient whose error the row measured."""
    result = quiet_sweep(
        tmp_path, mode, timesteps=[2], library="native", method="rk4", dtype="float32", scaling="none", mode=mode
    )
    (a,) = answers(result.results)
    assert a.train and a.plain_float32, a.judgement
    record = result.answers["float32"]
    assert "in plain float32" in record["sentence"] and "autocast" not in record["sentence"]
    assert "no float32 run to compare with" not in record["sentence"] and "emulated" not in record["sentence"]
    code = record["code"]
    assert "autocast" not in code and ".to(torch." not in code and "optimizer.step()" in code

    # The handed code builds the measured model itself (ra.model); run on the sweep's batch with a step of 0, its
    # loop leaves the gradient whose error the row measured.
    lines = code.splitlines()
    loop = next(i for i, line in enumerate(lines) if line.startswith("optimizer = "))
    names: dict = {}
    threads = torch.get_num_threads()  # the code sets the count the sweep measured with
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("\n".join(lines[:loop]), names)
        problem = names["problem"]
        optimizer = torch.optim.SGD(problem.func.parameters(), lr=0.0)
        names |= {"batches": [problem.y0], "optimizer": optimizer, "max_norm": float("inf")}
        exec("\n".join(line for line in lines[loop:] if not line.startswith(("optimizer = ", "max_norm = "))), names)
    torch.set_num_threads(threads)
    reference = copy.deepcopy(problem.func).double()
    measured = torch.cat([p.grad.reshape(-1) for p in problem.func.parameters()]).double()
    from roundoff_analyzer.solvers import odeint

    loss = problem.loss(
        odeint(reference, problem.y0.double(), torch.linspace(0, 1, 3, dtype=torch.float64), method="rk4_classical")
    )
    expected = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(reference.parameters()))])
    row = result.results.iloc[0]
    error = float(torch.linalg.vector_norm(measured - expected) / torch.linalg.vector_norm(expected))
    assert error == pytest.approx(row["grad_params_rel_err"], rel=1e-6)
