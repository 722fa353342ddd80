"""Every failure class that can occur on a CPU, each produced by a real run of a real model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from roundoff_analyzer.measuring.failures import headline

from .conftest import OVERFLOWING_OTFLOW, TINY_OTFLOW, results, run_cli

PROJECTED_FLOW = str(Path(__file__).parent / "fixtures" / "projected_flow.py") + ":projected_flow"


def _sweep(out: Path, *args: str):
    result = run_cli("sweep", *args, "--out", out, "--no-report")
    assert result.exit_code == 0, result.output
    return results(out)


def test_overflow_has_its_step_for_every_n_timesteps_where_it_overflows(overflow_sweep):
    table = results(overflow_sweep)
    overflowed = table[table.failure_class == "overflow"]
    assert set(overflowed.library) == {"torchdiffeq", "native"} and (overflowed.overflow_phase == "backward").all()
    # The native solver sums parameter gradients in float32, step by step: the step that overflowed is known.
    native = overflowed[overflowed.library == "native"]
    assert native.overflow_step.notna().all() and (native.overflow_step < native.n_timesteps).all()
    # torchdiffeq under autocast sums them over all steps on one float16 copy of each weight, after computing each
    # step's in float16: the records cannot tell which overflowed, and the row says both.
    for row in overflowed[overflowed.overflow_step.isna()].itertuples():
        assert row.library == "torchdiffeq" and "within one step or in its sum over the steps" in row.failure_message
    # Where the sweep overflowed, the largest finite adjoint already sat near float16's max.
    assert (overflowed.max_abs_adjoint > 0.1 * overflowed.dtype_max).all()


def test_underflow_without_scaling_and_dynamic_scaling_rescues_it(tmp_path):
    # The default otflow (d=8, hidden=32): its gradients are accurate to about 1 u when nothing underflows.
    table = _sweep(
        tmp_path / "under",
        "--model",
        "otflow",
        "--timesteps",
        "8",
        "--method",
        "rk4",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none,dynamic",
        "--loss-scale",
        "1e-12",
    )
    by_scaling = table.set_index("scaling")
    assert by_scaling.loc["none", "failure_class"] == "underflow", by_scaling.loc["none", "failure_message"]
    assert "collapsed" in by_scaling.loc["none", "failure_message"]
    # Most of the gradient is lost; not all: as in the authors' code, the terms OT-Flow forms with the float32 w
    # (the opening's trace terms, z) run in float32 under autocast and do not underflow (0.76 measured).
    assert by_scaling.loc["none", "grad_params_rel_err"] > 0.5
    assert by_scaling.loc["dynamic", "status"] == "ok"
    assert by_scaling.loc["dynamic", "grad_params_rel_err_over_u"] < 10
    assert by_scaling.loc["dynamic", "grad_y0_rel_err_over_u"] < 10
    assert by_scaling.loc["dynamic", "final_scale"] > 2.0**30  # lifted far above 1 to meet the tiny adjoint


def test_scaler_exhausted_keeps_its_final_scale(tmp_path):
    table = _sweep(
        tmp_path / "exhausted",
        "--model",
        "otflow",
        *OVERFLOWING_OTFLOW,
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--library",
        "torchdiffeq",
        "--dtype",
        "float16",
        "--scaling",
        "grad",
        "--max-retries",
        "2",
    )
    row = table.iloc[0]
    assert row.failure_class == "scaler_exhausted", row.failure_message
    assert row.final_scale == 2.0**14 and row.scale_retries == 2  # 65536 halved twice, still overflowing


def test_gradscaler_refuses_float16_gradients_in_pure_mode(tmp_path):
    table = _sweep(
        tmp_path / "pure",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--dtype",
        "float16",
        "--scaling",
        "grad",
        "--mode",
        "pure",
    )
    assert (table.failure_class == "gradscaler_fp16_unscale").all(), table.failure_message
    assert table.failure_message.str.contains("Attempting to unscale FP16 gradients").all()
    assert (table.failure_type == "ValueError").all()


def test_dtype_mismatch_eager_and_out_of_torchscript(tmp_path):
    grid = [
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--library",
        "torchdiffeq",
        "--dtype",
        "float16,bfloat16",
        "--scaling",
        "none",
    ]
    eager = _sweep(tmp_path / "eager", "--model", PROJECTED_FLOW, *grid)
    assert (eager.failure_class == "dtype_mismatch").all(), eager.failure_message
    assert eager.failure_message.str.contains("same dtype").all()

    scripted = _sweep(tmp_path / "scripted", "--model", PROJECTED_FLOW, "-o", "script=true", *grid).set_index("dtype")
    # TorchScript ran float16 first and kept its casts: bfloat16 then meets Half.
    assert scripted.loc["bfloat16", "failure_class"] == "torchscript_dtype_mismatch", scripted.loc[
        "bfloat16", "failure_message"
    ]
    assert (
        "Half" in scripted.loc["bfloat16", "failure_message"]
        and "BFloat16" in scripted.loc["bfloat16", "failure_message"]
    )
    # the headline, not the interpreter's preamble
    assert "TorchScript" not in scripted.loc["bfloat16", "failure_message"]


@pytest.mark.slow  # waits out real time limits: 20 s
def test_timeout_stops_only_that_configuration(tmp_path):
    table = _sweep(
        tmp_path / "timeout",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,512",
        "--method",
        "rk4",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--timeout",
        "1.5",
    )
    by_n = table.set_index("n_timesteps")
    assert by_n.loc[4, "status"] == "ok"
    assert by_n.loc[512, "failure_class"] == "timeout" and "1.5 s" in by_n.loc[512, "failure_message"]


def test_autocast_and_pure_run_side_by_side(tmp_path):
    table = _sweep(
        tmp_path / "modes",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "bfloat16",
        "--scaling",
        "none",
        "--mode",
        "autocast,pure",
    )
    by_mode = table.set_index("mode")
    assert list(by_mode.index) == ["autocast", "pure"] and (table.status == "ok").all()
    # Without a float32 master copy the parameters themselves are rounded: pure mode is less accurate.
    assert by_mode.loc["pure", "sol_rel_err"] > by_mode.loc["autocast", "sol_rel_err"]


def test_otflow_torchscript_variant_runs_and_matches_eager(tmp_path):
    grid = [
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "bfloat16",
        "--scaling",
        "none",
    ]
    eager = _sweep(tmp_path / "eager", *grid)
    scripted = _sweep(tmp_path / "scripted", *grid, "-o", "jit=true")
    assert (scripted.status == "ok").all() and (eager.status == "ok").all()
    # TorchScript may fuse the helpers and round their intermediates differently: same order, not the same bits.
    ratio = scripted.grad_params_rel_err.iloc[0] / eager.grad_params_rel_err.iloc[0]
    assert 0.5 < ratio < 2, ratio


def test_headline_takes_the_error_line_out_of_a_torchscript_trace():
    trace = RuntimeError(
        "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most recent call "
        "last):\n"
        '  File "x.py", line 3\n    return torch.mv(h, w)\nRuntimeError: addmv input tensors must have the same dtype\n'
    )
    assert headline(trace) == "RuntimeError: addmv input tensors must have the same dtype"
    assert headline(ValueError("")) == "ValueError"


def test_an_adaptive_step_that_underflows_is_its_own_class_naming_cause_and_remedy(tmp_path):
    # torchdiffeq's dopri5 at its own default rtol (1e-7) with the state in float16 (unit roundoff 4.9e-4).
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--timesteps",
        "4",
        "--library",
        "torchdiffeq",
        "--method",
        "dopri5",
        "--dtype",
        "float16",
        "--mode",
        "pure",
        "--scaling",
        "none",
        "--rtol",
        "1e-7",
        "--atol",
        "1e-9",
        "--out",
        tmp_path / "s",
        "--no-report",
    )
    assert result.exit_code == 0, result.output
    warning = (
        "warning: rtol 1e-07 is below float16's unit roundoff 0.00049: dopri5 in pure float16 can fail with "
        "step_size_underflow"
    )
    assert warning in " ".join(result.output.split())
    row = results(tmp_path / "s").iloc[0]
    assert row.failure_class == "step_size_underflow", row.failure_message
    assert "underflow in dt" in row.failure_message
    assert (
        "rtol 1e-07 below float16's unit roundoff 0.00049" in row.failure_message and "remedy:" in row.failure_message
    )


def test_no_warning_where_the_tolerance_is_above_the_unit_roundoff_or_the_state_is_float32():
    from roundoff_analyzer.planning.tolerances import tolerance_warnings

    assert tolerance_warnings(["dopri5"], ["float16"], ["pure"], 1e-7)
    assert tolerance_warnings(["dopri5"], ["bfloat16", "float16"], ["pure"], 1e-3) == [
        "warning: rtol 0.001 is below bfloat16's unit roundoff 0.0039: dopri5 in pure bfloat16 can fail with "
        "step_size_underflow; set --rtol well above 0.0039"
    ]
    assert not tolerance_warnings(["dopri5"], ["float16"], ["autocast"], 1e-7)  # the state stays float32
    assert not tolerance_warnings(["rk4"], ["float16"], ["pure"], 1e-7)  # no step control on a fixed grid


def test_the_answer_never_picks_an_adaptive_run_whose_rtol_is_below_its_dtype_s_unit_roundoff():
    import pandas as pd

    from roundoff_analyzer.judging.answer import below_unit_roundoff

    runs = pd.DataFrame(
        {"method": ["dopri5", "dopri5", "rk4"], "rtol": [1e-7, 1e-2, None], "unit_roundoff": [2.0**-11] * 3}
    )
    assert below_unit_roundoff(runs).tolist() == [True, False, False]
    assert not below_unit_roundoff(runs.drop(columns="rtol")).any()  # tables from before adaptive methods


def test_every_failure_class_has_its_explanation_in_the_report():
    """A class added to measuring/failures.py without an explanation would be explained as an unknown error."""
    from roundoff_analyzer.measuring.failures import FAILURE_CLASSES
    from roundoff_analyzer.report.causes import explained_classes

    assert set(FAILURE_CLASSES) == explained_classes()


def test_every_failure_class_has_one_record_with_its_words():
    from roundoff_analyzer.measuring.failures import FAILURE_KINDS
    from roundoff_analyzer.measuring.outcomes import FailureClass

    assert set(FAILURE_KINDS) == set(FailureClass) and len(FAILURE_KINDS) == len(FailureClass)
    for failure_class, kind in FAILURE_KINDS.items():
        assert kind.name is failure_class
        assert kind.when.strip() and kind.remedy.strip(), failure_class
        assert all(header.strip() and column.strip() for header, column in kind.table_columns), failure_class


def test_the_failures_page_names_every_class_with_its_records_remedy():
    from roundoff_analyzer.measuring.failures import FAILURE_KINDS

    page = " ".join((Path(__file__).parents[1] / "docs" / "failures.md").read_text(encoding="utf-8").split())
    for failure_class, kind in FAILURE_KINDS.items():
        assert f"| `{failure_class.value}` |" in page and f"| {kind.remedy} |" in page, failure_class


def test_a_failure_groups_table_shows_its_classes_columns_and_every_column_has_a_format():
    from roundoff_analyzer.measuring.failures import FAILURE_KINDS
    from roundoff_analyzer.report.tables import _COLUMN_FORMATS

    named = {column for kind in FAILURE_KINDS.values() for _, column in kind.table_columns}
    assert named == set(_COLUMN_FORMATS)


# Strings equal to a Status or FailureClass value that mean something else there, by file.
_OTHER_MEANINGS = {
    "roundoff_analyzer/execution/processes.py": {"failed"},  # an event kind on the worker queue
    "roundoff_analyzer/execution/slurm_task.py": {"error"},  # the key of a Slurm task's report
    "roundoff_analyzer/planning/config.py": {"error"},  # Slurm's --error option
    "roundoff_analyzer/judging/check_output.py": {"skipped"},  # JUnit's attribute
    "roundoff_analyzer/commands/sweep.py": {"timeout"},  # a setting's key
}
# Files of issue 59's other branches (T2: the protocols, T3: cli/) whose literals those branches replace: an entry
# here goes when its branch is merged.
_NOT_YET_MEMBERS: dict[str, set[str]] = {}


_PANDAS_COMPARE = {"eq", "ne", "isin"}


def _values_compared(tree: ast.AST, values: set[str]) -> set[str]:
    """The constants among `values` that a comparison (==, !=, in), a dict key or pandas' eq/ne/isin spells."""
    found = set()
    for node in ast.walk(tree):
        sides: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            sides = [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PANDAS_COMPARE:
            sides = list(node.args)
        for side in sides:
            for constant in side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]:
                if isinstance(constant, ast.Constant) and constant.value in values:
                    found.add(constant.value)
    return found


def test_no_module_but_outcomes_compares_with_a_status_or_failure_class_spelled_as_a_string():
    from roundoff_analyzer.measuring.outcomes import FailureClass, Status

    root = Path(__file__).parents[1]
    values = {str(value) for value in (*Status, *FailureClass)}
    spelled = {}
    for path in sorted([*(root / "roundoff_analyzer").rglob("*.py"), *(root / "cli").rglob("*.py")]):
        name = path.relative_to(root).as_posix()
        if name != "roundoff_analyzer/measuring/outcomes.py":
            found = _values_compared(ast.parse(path.read_text(encoding="utf-8")), values)
            if found - _OTHER_MEANINGS.get(name, set()) - _NOT_YET_MEMBERS.get(name, set()):
                spelled[name] = sorted(found)
            assert _OTHER_MEANINGS.get(name, set()) <= found, f"{name}: an exception that is no longer needed"
    assert not spelled, f"use Status or FailureClass members: {spelled}"
