"""The range profile records the adjoint as the low dtype holds it (native side)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from tests.conftest import TINY_OTFLOW, results, run_cli

FLOAT16_MAX = 65504.0


@pytest.fixture(scope="module")
def float16_native_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("range") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--library",
        "native",
        "--dtype",
        "float16",
        "--scaling",
        "none,grad,dynamic",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def test_no_ok_float16_row_records_an_adjoint_beyond_float16(float16_native_sweep):
    table = results(float16_native_sweep)
    ok = table[table.status == "ok"]
    assert len(ok) == len(table) == 12
    assert (ok.max_abs_adjoint <= FLOAT16_MAX).all(), ok[["scaling", "n_timesteps", "max_abs_adjoint"]]


def test_the_profile_holds_the_scaled_adjoint_cast_to_float16(float16_native_sweep):
    profile = pd.read_parquet(float16_native_sweep / "profile.parquet")
    backward = profile[profile.phase == "backward"]
    held = backward.max_abs_low.astype(float)
    # Held in float16: finite values within its range, anything larger became inf in the cast.
    assert all(value <= FLOAT16_MAX or value == math.inf for value in held)
    # Under loss scaling the adjoint entering each product is the scaled float32 one, held as its float16
    # rounding (rounding is monotone, so the largest held is the largest's rounding): within float16's unit
    # roundoff of it, and exactly what float16 makes of it.
    grad = backward[backward.scaling == "grad"]
    float32, float16 = grad.max_abs.astype(float), grad.max_abs_low.astype(float)
    assert ((float16 - float32).abs() <= float32 * 2**-11).all()
    assert torch.equal(torch.tensor(float32.to_numpy()).half().double(), torch.tensor(float16.to_numpy()))
    # The dynamic scaler keeps what the low dtype holds near 1/eps, far inside the range.
    dynamic = backward[backward.scaling == "dynamic"].max_abs_low.astype(float)
    assert dynamic.between(1.0, FLOAT16_MAX / 8).all()
