"""The native solver's backward as each row ran it (`backward_mode`), and what the report and the answer say of it: a
real sweep where hardware bfloat16 and float32 keep the stored stages and emulated arithmetic recomputes from the
states."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from roundoff_analyzer.judging import answer
from roundoff_analyzer.report.sections.answer import backward_words
from tests.conftest import TINY_OTFLOW, run_cli


@pytest.fixture(scope="module")
def mixed_modes(tmp_path_factory):
    out = tmp_path_factory.mktemp("modes") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--dtype",
        "float32,bfloat16",
        "--arithmetic",
        "hardware,emulated",
        "--library",
        "native",
        "--scaling",
        "none",
        "--cpu-memory",
        "--no-timing",
        "--executor",
        "local",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out, pd.read_parquet(out / "results.parquet")


def test_each_row_records_the_backward_its_native_solve_ran(mixed_modes):
    _, table = mixed_modes
    ran = table[table.status == "ok"]
    native = ran[ran.library == "native"]
    modes = native.set_index(["dtype", "arithmetic"])["backward_mode"]
    # "auto" keeps the stages where the tape fits (this tiny model's always does); emulated arithmetic recomputes.
    assert modes["float32", "hardware"] == "stages"
    assert modes["bfloat16", "hardware"] == "stages"
    assert modes["bfloat16", "emulated"] == modes["float32", "emulated"] == "states"


def test_rows_of_another_library_record_no_backward_mode(tiny_sweep):
    table = pd.read_parquet(tiny_sweep / "results.parquet")
    ran = table[table.status == "ok"]
    assert set(ran[ran.library == "native"]["backward_mode"]) == {"stages"}
    others = ran[ran.library != "native"]
    assert not others.empty and others["backward_mode"].isna().all()


def test_the_cost_says_which_backward_ran_and_where_the_compared_rows_differ(mixed_modes):
    out, table = mixed_modes
    text = " ".join((out / "report.md").read_text().split())
    cost = text[text.index("## Cost") :]
    assert "| native backward |" in cost
    mixed = re.search(r"native's runs did not all take the same backward \(([^)]*)\)", cost)
    assert mixed, cost[:2000]
    assert "stored stages" in mixed[1] and "recomputed from stored states" in mixed[1]
    native = table[table.status == "ok"]
    emulated = native[(native.dtype == "bfloat16") & (native.arithmetic == "emulated")]
    said = answer.cost(table, emulated)
    # Set against emulated float32 only (a run's cost is against float32 in its own arithmetic), which recomputed too.
    assert said is not None and said.backward_modes == ("states",) and said.float32_backward_modes == ("states",)
    emulated_float32 = native[(native.dtype == "float32") & (native.arithmetic == "emulated")].iloc[0]
    seconds = emulated.time_forward_s.iloc[0] + emulated.time_backward_s.iloc[0]
    ratio = seconds / (emulated_float32.time_forward_s + emulated_float32.time_backward_s)
    assert said.time_ratio == pytest.approx((ratio, ratio))
    peak = float(emulated["peak_memory_bytes"].iloc[0])
    assert said.peak_bytes == (peak, peak)
    words = backward_words(said)
    mib = f"{peak / 2**20:.3g}"
    assert words == f"; the native solver's backward: recomputed from stored states, peak {mib} MiB"
    # Where the float32 runs it is set against took the other backward, the words say the ratios compare the two.
    stages_float32 = table.assign(backward_mode=table.backward_mode.where(table.dtype != "float32", "stages"))
    crossed = answer.cost(stages_float32, emulated)
    assert crossed is not None and crossed.float32_backward_modes == ("stages",)
    assert "(float32's: stored stages, so the ratios to float32 compare the two backwards" in backward_words(crossed)
    # Where the float32 runs it is set against ran the same backward, nothing more is said.
    plain = answer.cost(table, native[(native.dtype == "float32") & (native.arithmetic == "hardware")])
    assert plain is not None and plain.backward_modes == ("stages",) and plain.float32_backward_modes == ()
    assert backward_words(plain).startswith("; the native solver's backward: stored stages, peak ")
    assert "float32's:" not in backward_words(plain)


def test_tables_from_before_the_column_say_nothing_of_it(mixed_modes):
    out, table = mixed_modes
    older = table.drop(columns="backward_mode")
    native = older[(older.status == "ok") & (older.dtype == "bfloat16")]
    said = answer.cost(older, native)
    assert said is not None and said.backward_modes == () and said.float32_backward_modes == ()
    assert backward_words(said) == ""
