"""Which module: the per-module table (--per-module, modules.parquet) and the keep_float32 axis, on a vector field
with one layer that multiplies by 1e5 (tests/fixtures/amplified_mlp.py)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

import roundoff_analyzer as ra
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.report.sections.per_module import SECTION, origin, rows_of

from .conftest import as_written_before_content_hashes

AMPLIFIED_MLP = str(Path(__file__).parent / "fixtures" / "amplified_mlp.py") + ":amplified_mlp"
BASELINE = Path(__file__).parent.parent / "reports" / "baselines" / "otflow-ci"


@pytest.fixture(scope="module")
def amplified(tmp_path_factory):
    out = tmp_path_factory.mktemp("amplified") / "sweep"
    return ra.sweep(
        AMPLIFIED_MLP,
        timesteps=[4],
        method="euler",
        library=["torchdiffeq", "native"],
        dtype="float16",
        scaling="none",
        keep_float32=["none", "amplify"],
        per_module=True,
        noise_batches=0,
        out=out,
        progress=False,
    )


def _run(result, library: str, kept: str) -> pd.Series:
    results = result.results
    return results[(results["library"] == library) & (results["keep_float32"] == kept)].iloc[0]


@pytest.mark.parametrize("library", ["torchdiffeq", "native"])
def test_the_amplifying_layer_is_named_first_to_overflow_and_keeping_it_in_float32_makes_the_run_ok(amplified, library):
    plain = _run(amplified, library, "none")
    assert plain["status"] == "failed" and plain["failure_class"] == "overflow"
    found = origin(rows_of(amplified.modules, plain))
    assert (found.module, found.phase, found.step, found.produced) == ("amplify", "forward", 0, True)

    kept = _run(amplified, library, "amplify")
    assert kept["status"] == "ok"
    assert kept["grad_params_rel_err"] < 1e-2
    rows = rows_of(amplified.modules, kept)
    assert rows["first_nonfinite_step"].isna().all()
    amplify = rows[(rows["module"] == "amplify") & (rows["phase"] == "forward")].iloc[0]
    # Kept in float32, its output is beyond float16's range without overflowing: the table says how far.
    assert amplify["kept_float32"] and amplify["max_abs_over_dtype_max"] > 1


def test_a_module_computed_exactly_in_the_dtype_adds_no_roundoff(amplified):
    rows = rows_of(amplified.modules, _run(amplified, "torchdiffeq", "amplify"))
    exact = rows[rows["module"].isin(["identity", "doubling"])]
    assert len(exact) == 4  # forward and backward of each
    assert (exact["local_rel_err"] == 0).all()
    inexact = rows[(rows["module"] == "inner") & (rows["phase"] == "forward")]["local_rel_err"].iloc[0]
    assert 0 < inexact < 1e-2  # a float16 matrix product does round


def test_the_module_table_has_one_row_per_configuration_module_and_phase(amplified):
    modules = amplified.modules
    for column in (
        "keep_float32",
        "n_timesteps",
        "dtype",
        "module",
        "phase",
        "max_abs",
        "local_rel_err",
        "first_nonfinite_step",
    ):
        assert column in modules
    assert not modules.duplicated(["library", "keep_float32", "module", "phase"]).any()
    assert set(modules["module"]) == {"(vector field)", "inner", "identity", "doubling", "amplify", "shrink", "outer"}


def test_the_report_says_where_the_overflow_began_and_what_keeping_the_layer_bought(amplified):
    report = (amplified.folder / "report.md").read_text()
    section = report.split(SECTION, 1)[1].split("\n## ", 1)[0]
    assert "The overflow began in `amplify` at forward step 0" in section
    assert "Keeping `amplify` in float32 (float16): 2 of the 2 runs that failed without it ran ok" in section
    answer = report.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "Keeping `amplify` in float32 is what makes float16" in answer
    assert 'roundoff_analyzer.keep_float32(func, "amplify")' in answer


def test_a_resumed_sweep_reuses_the_module_rows(amplified):
    again = ra.sweep(
        AMPLIFIED_MLP,
        timesteps=[4],
        method="euler",
        library=["torchdiffeq", "native"],
        dtype="float16",
        scaling="none",
        keep_float32=["none", "amplify"],
        per_module=True,
        noise_batches=0,
        out=amplified.folder,
        progress=False,
        report=False,
    )
    assert again.run.reference_solves == 0
    pd.testing.assert_frame_equal(again.modules, amplified.modules)


def test_results_written_before_the_axis_read_as_keeping_nothing(tmp_path):
    from roundoff_analyzer.storage.results import load_results

    # The CI baseline's table as a version before the axis wrote it: without the column.
    shutil.copy(BASELINE / "manifest.json", tmp_path / "manifest.json")
    pd.read_parquet(BASELINE / "results.parquet").drop(columns="keep_float32").to_parquet(tmp_path / "results.parquet")
    assert (load_results(tmp_path)["keep_float32"] == "none").all()


def test_a_pattern_naming_no_module_is_refused_with_the_modules_named(tmp_path):
    with pytest.raises(
        InputError, match="keep_float32 'outr' matches no module of the model; its modules: inner, identity"
    ):
        ra.sweep(AMPLIFIED_MLP, timesteps=[4], keep_float32="outr", out=tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_keep_float32_runs_a_module_in_float32_under_autocast_and_survives_a_deep_copy():
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
        kept = ra.keep_float32(layer)
        assert kept is layer and layer(x.bfloat16()).dtype == torch.float32
        twin = copy.deepcopy(layer)
        with torch.no_grad():
            twin.weight.zero_()
            twin.bias.zero_()
        assert (twin(x) == 0).all() and (layer(x) != 0).any()  # the copy runs its own weights
    assert copy.deepcopy(layer).double()(x.double()).dtype == torch.float64  # a float64 run stays float64


def test_keep_float32_by_name_wraps_modules_and_methods():
    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(3, 3)

        def closed_form(self, y):
            return y @ self.head.weight

    field = Field()
    y = torch.randn(2, 3)
    assert ra.keep_float32(field, "head+closed_form") is field
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert field.head(y).dtype == torch.float32 and field.closed_form(y).dtype == torch.float32
    with pytest.raises(ValueError, match="'tail' names no module or method"):
        ra.keep_float32(field, "tail")


def test_shards_written_before_the_axis_are_resumed(tmp_path):
    import pyarrow.parquet as pq

    settings = dict(
        timesteps=[4],
        method="euler",
        library="torchdiffeq",
        dtype="float16",
        scaling="none",
        noise_batches=0,
        out=tmp_path / "s",
        progress=False,
        report=False,
    )
    ra.sweep(AMPLIFIED_MLP, **settings)
    for shard in (tmp_path / "s" / "shards").glob("*.parquet"):
        table = pq.read_table(shard)
        old = table.drop_columns(["keep_float32", "modules"])  # as a version before the axis wrote it
        pq.write_table(old.replace_schema_metadata(table.schema.metadata), shard)
    as_written_before_content_hashes(tmp_path / "s")
    again = ra.sweep(AMPLIFIED_MLP, **settings)
    assert again.run.reference_solves == 0
    assert not (tmp_path / "s" / "set_aside").exists()
    assert (again.results["keep_float32"] == "none").all()


def test_the_module_table_of_a_searching_loss_scaler_is_that_of_the_pass_that_counted(tmp_path):
    """`grad` searches its loss scale over several backward passes, the one that counted not always the last; the
    module table is that pass's, as in a run that starts at the scale found and needs one pass."""
    common = {
        "options": {"d": "3", "hidden": "8", "batch": "16"},
        "timesteps": [8],
        "method": "euler",
        "library": "native",
        "dtype": "float16",
        "scaling": "grad",
        "per_module": True,
        "noise_batches": 0,
        "report": False,
        "progress": False,
    }
    searched = ra.sweep("otflow", out=tmp_path / "searched", **common)
    found = searched.results.iloc[0]
    assert found["status"] == "ok" and found["scale_retries"] >= 2
    direct = ra.sweep("otflow", out=tmp_path / "direct", scaler={"init_scale": float(found["final_scale"])}, **common)
    assert direct.results.iloc[0]["scale_retries"] == 0

    def backward(modules: pd.DataFrame) -> pd.DataFrame:
        return modules[modules["phase"] == "backward"].reset_index(drop=True)

    assert len(backward(searched.modules)) > 1
    pd.testing.assert_frame_equal(backward(searched.modules), backward(direct.modules))
