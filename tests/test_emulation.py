"""Emulated low-precision arithmetic against the real thing: rounding bit for bit, one layer, whole sweeps."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from roundoff_analyzer.axes.dtypes import DTYPES
from roundoff_analyzer.axes.grid import Configuration
from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.emulation import (
    EmulationSettings,
    NumberFormat,
    custom_format,
    emulate,
    is_low,
    round_by_cast,
    round_nearest,
    round_stochastic,
)
from roundoff_analyzer.emulation.rounding import quantum
from roundoff_analyzer.measuring.columns import ERROR_METRICS

from .conftest import TINY_OTFLOW, results, run_cli

TORCH_FORMATS = ["float16", "bfloat16", "float8_e4m3", "float8_e5m2"]


def _hard_cases(fmt: NumberFormat, generator: torch.Generator) -> torch.Tensor:
    """Normal numbers over a wide exponent range, subnormals, halfway points (ties), overflow and specials."""
    wide = (
        torch.randn(20000, generator=generator) * 2.0 ** torch.randint(-40, 40, (20000,), generator=generator).float()
    )
    subnormal = fmt.smallest_subnormal * torch.arange(-64, 64, 0.25)
    representable = round_by_cast(torch.randn(5000, generator=generator) * fmt.max / 8, fmt)
    above = round_by_cast(representable * (1 + 2 * fmt.eps), fmt)  # the next value up, or close to it
    ties = (representable + above) / 2
    beyond = fmt.max * torch.tensor([1 + fmt.unit_roundoff / 2, 1 + fmt.unit_roundoff, 1.0 + fmt.eps, 2.0, 1e3])
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, fmt.max, -fmt.max, fmt.smallest_normal, 1e-45])
    return torch.cat([wide, subnormal, ties, representable, beyond, -beyond, specials])


@pytest.mark.unit
@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_round_to_nearest_even_equals_torch_cast_bit_for_bit(name):
    fmt = DTYPES.get(name).format
    x = _hard_cases(fmt, torch.Generator().manual_seed(1))
    ours, torchs = round_nearest(x, fmt), round_by_cast(x, fmt)
    assert torch.equal(ours.view(torch.int32), torchs.view(torch.int32))
    nan = torch.tensor([math.nan])
    assert round_nearest(nan, fmt).isnan().all() and round_by_cast(nan, fmt).isnan().all()


@pytest.mark.unit
def test_e4m3_saturates_where_e5m2_overflows_as_torch_does():
    huge = torch.tensor([1e6, math.inf, -1e6])
    assert round_nearest(huge, DTYPES.get("float8_e4m3").format).tolist() == [448.0, 448.0, -448.0]
    assert round_nearest(huge, DTYPES.get("float8_e5m2").format).tolist() == [math.inf, math.inf, -math.inf]


@pytest.mark.unit
@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_format_constants_match_torch_finfo(name):
    spec = DTYPES.get(name)
    info = torch.finfo(spec.torch_dtype)
    assert (spec.max, spec.smallest_normal, spec.unit_roundoff) == (info.max, info.smallest_normal, info.eps / 2)
    assert spec.smallest_subnormal == info.smallest_normal * info.eps


@pytest.mark.unit
def test_custom_formats_are_ieee_like_and_equal_torch_where_the_layout_is_the_same():
    e5m10, e8m7, e4m3 = custom_format("e5m10"), custom_format("e8m7"), DTYPES.get("e4m3").format
    assert (e4m3.max, e4m3.unit_roundoff, e4m3.smallest_normal, e4m3.smallest_subnormal) == (240.0, 2**-4, 2**-6, 2**-9)
    x = _hard_cases(e5m10, torch.Generator().manual_seed(2))
    assert torch.equal(
        round_nearest(x, e5m10).view(torch.int32), round_by_cast(x, DTYPES.get("float16").format).view(torch.int32)
    )
    assert torch.equal(
        round_nearest(x, e8m7).view(torch.int32), round_by_cast(x, DTYPES.get("bfloat16").format).view(torch.int32)
    )
    assert custom_format("e9m3") is None and "e9m3" not in DTYPES


@pytest.mark.unit
def test_stochastic_rounding_picks_a_neighbour_keeps_exact_values_and_is_unbiased():
    fmt = DTYPES.get("float16").format
    generator = torch.Generator().manual_seed(0)
    x = torch.full((200000,), 1.0 + fmt.eps / 4)  # a quarter of the way from 1 to the next float16
    rounded = round_stochastic(x, fmt, generator)
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + fmt.eps}
    assert abs(float((rounded == 1.0 + fmt.eps).float().mean()) - 0.25) < 0.01
    exact = round_by_cast(torch.randn(1000, generator=generator), fmt)
    assert torch.equal(round_stochastic(exact, fmt, generator), exact)


STOCHASTIC_FORMATS = ["float16", "bfloat16", "float8_e4m3", "float8_e5m2", "e8m20", "e8m22"]


def _format(name):
    return DTYPES.get(name).format if name in DTYPES else custom_format(name)


@pytest.mark.unit
@pytest.mark.parametrize("name", STOCHASTIC_FORMATS)
def test_stochastic_rounding_never_moves_an_exact_value(name):
    fmt = _format(name)
    generator = torch.Generator().manual_seed(1)
    # Values of the format across its normal and subnormal range, both signs (within E4M3's 448).
    exact = round_nearest(
        (torch.rand(10**6, generator=generator) - 0.5) * 2.0 ** torch.randint(-12, 8, (10**6,), generator=generator),
        fmt,
    )
    moved = round_stochastic(exact, fmt, generator) != exact
    assert int(moved.sum()) == 0


@pytest.mark.unit
@pytest.mark.parametrize("name", STOCHASTIC_FORMATS)
def test_stochastic_rounding_is_unbiased_within_the_binomial_standard_error(name):
    fmt = _format(name)
    generator = torch.Generator().manual_seed(2)
    n = 200000
    # One value between two neighbours at about 0.3 of a quantum above 1 (the nearest float32 fraction
    # there: e8m22 leaves float32 one bit below its quantum, so a half), then many values at random.
    bits_below = 23 - fmt.mantissa_bits
    fraction = max(round(0.3 * 2**bits_below), 1) / 2**bits_below
    x = torch.full((n,), 1.0 + fraction * fmt.eps)
    up = (round_stochastic(x, fmt, generator) > 1.0).double()
    standard_error = math.sqrt(fraction * (1 - fraction) / n)
    assert abs(float(up.mean()) - fraction) <= 3 * standard_error
    # The mean of (rounded - x) in quanta over values spread across [1, 2) and [-2^-3, 2^-3).
    spread = torch.cat([torch.rand(n, generator=generator) + 1, (torch.rand(n, generator=generator) - 0.5) / 4])
    distance = (round_stochastic(spread, fmt, generator).double() - spread.double()) / quantum(spread, fmt).double()
    assert abs(float(distance.mean())) <= 3 * float(distance.std()) / math.sqrt(distance.numel())


def _layer_run(x, layer, context):
    with context():
        out = torch.tanh(layer(x))
    out.float().pow(2).sum().backward()
    grads = [x.grad.clone(), layer.weight.grad.clone()]
    x.grad = layer.weight.grad = layer.bias.grad = None
    return out, grads


@pytest.mark.unit
def test_one_linear_layer_emulated_equals_autocast_forward_and_rounds_its_gradients():
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(16, 8), torch.randn(32, 16, requires_grad=True)
    real, real_grads = _layer_run(x, layer, lambda: torch.autocast("cpu", dtype=torch.float16))
    emulated, emulated_grads = _layer_run(x, layer, lambda: emulate(EmulationSettings(DTYPES.get("float16").format)))
    assert real.dtype == torch.float16 and emulated.dtype == torch.float32 and is_low(emulated)
    assert torch.equal(real.float(), emulated)
    for ours, theirs in zip(emulated_grads, real_grads):
        assert torch.equal(round_by_cast(ours, DTYPES.get("float16").format), ours)  # float16 values, as autocast's are
        assert float((ours - theirs).norm() / theirs.norm()) < 4 * DTYPES.get("float16").unit_roundoff


@pytest.mark.unit
def test_configuration_ids_of_hardware_runs_are_unchanged():
    hardware = Configuration("otflow", "native", "rk4", 8, "float16", "none", "autocast")
    assert hardware.id == "otflow-native-rk4-n000008-float16-none-autocast"
    stochastic = Configuration("otflow", "native", "rk4", 8, "float16", "none", "autocast", "emulated", "stochastic")
    assert stochastic.id == "otflow-native-rk4-n000008-float16-none-autocast-emulated-stochastic"


@pytest.fixture(scope="module")
def hardware_and_emulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("emulation") / "sweep"
    # The native solver recomputes its steps under emulated arithmetic (it keeps no stage graph there): hardware rows
    # in the same mode, so that the two arithmetics are compared on one algorithm. Workers would not see the setting.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LIBRARIES.get("native"), "checkpoint", "states")
        result = _hardware_and_emulated(out)
    assert result.exit_code == 0, result.output
    return results(out)


def _hardware_and_emulated(out):
    return run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--method",
        "euler,rk4",
        "--dtype",
        "float16,bfloat16",
        "--arithmetic",
        "hardware,emulated",
        "--library",
        "torchdiffeq,native",
        "--scaling",
        "none",
        "--no-report",
        "--no-timing",
        "--executor",
        "local",
        "--out",
        out,
    )


def test_emulated_errors_are_within_a_factor_two_of_hardware_with_the_same_outcome(hardware_and_emulated):
    keys = ["library", "method", "n_timesteps", "dtype", "scaling", "mode"]
    hardware = hardware_and_emulated[hardware_and_emulated.arithmetic == "hardware"].set_index(keys)
    emulated = hardware_and_emulated[hardware_and_emulated.arithmetic == "emulated"].set_index(keys).loc[hardware.index]
    assert len(hardware) == len(emulated) == 16
    assert hardware.status.tolist() == emulated.status.tolist()
    assert hardware.failure_class.fillna("").tolist() == emulated.failure_class.fillna("").tolist()
    ratios = emulated[list(ERROR_METRICS)] / hardware[list(ERROR_METRICS)]
    assert ((ratios >= 0.5) & (ratios <= 2.0)).all().all(), ratios


def test_fp8_sweep_runs_emulated_by_default_with_the_format_u(tmp_path):
    out = tmp_path / "fp8"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "-o",
        "alpha=1,2e4,8e3",  # the likelihood's weight over the batch, 2e4 / 16 = 1250, is the adjoint's largest entry
        "--timesteps",
        "4",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float8_e4m3,float8_e5m2,e5m2",
        "--scaling",
        "none",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out).set_index("dtype")
    assert (table.arithmetic == "emulated").all()
    # E4M3 has no infinity: otflow's adjoint (up to 1250) saturates at 448 unless it is scaled; E5M2 holds it.
    assert (
        table.loc["float8_e4m3", "failure_class"] == "overflow"
        and "saturated" in table.loc["float8_e4m3", "failure_message"]
    )
    assert (table.drop(index="float8_e4m3").status == "ok").all()
    assert table.unit_roundoff.to_dict() == {"float8_e4m3": 2**-4, "float8_e5m2": 2**-3, "e5m2": 2**-3}
    assert table.fp8_scaling.tolist() == [True, True, True]
    assert (table.grad_params_rel_err_over_u == table.grad_params_rel_err / table.unit_roundoff).all()
    report = (out / "report.md").read_text()
    assert (
        "**8-bit float8_e4m3** (u = 6.25e-02, per-tensor fp8 scaling on)" in report
        and "**8-bit float8_e5m2**" in report
    )
    answer = report.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert "- **float8_e4m3**: do not train in float8_e4m3." in answer  # it overflowed
    assert "```python" not in answer  # no torch dtype computes in an emulated format: no code to write
    show = run_cli("show", out, "--where", "dtype == 'float8_e4m3'")
    # the table's title, wrapped to its width
    assert show.exit_code == 0 and "1 of 3 configurations" in " ".join(show.output.split())


def test_hardware_fp8_on_a_cpu_is_a_failed_row_that_says_why(tmp_path):
    out = tmp_path / "fp8-hardware"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--library",
        "native",
        "--dtype",
        "float8_e5m2",
        "--scaling",
        "none",
        "--arithmetic",
        "hardware",
        "--no-report",
        "--out",
        out,
        "--device",
        "cpu",
    )
    assert result.exit_code == 0, result.output
    row = results(out).iloc[0]
    assert (
        row.status == "failed"
        and row.failure_class == "unsupported"
        and "autocast on cpu does not run" in row.failure_message
    )


@pytest.mark.slow  # many stochastic repeats: 10 s
def test_stochastic_repeats_estimate_significant_digits_close_to_the_reference_error(tmp_path):
    out = tmp_path / "stochastic"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--method",
        "rk4",
        "--library",
        "torchdiffeq,native",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--rounding",
        "stochastic",
        "--repeats",
        "4",
        "--no-report",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    table = results(out)
    assert (
        (table.arithmetic == "emulated").all()
        and (table.rounding == "stochastic").all()
        and (table.status == "ok").all()
    )
    assert (table.deterministic == False).all()  # noqa: E712 - the repeats differ, as they must
    digits, from_reference = table.sig_digits_grad_params, -table.grad_params_rel_err.map(math.log10)
    assert ((digits - from_reference).abs() < 1.0).all(), pd.DataFrame({"digits": digits, "reference": from_reference})


SCALED_MLP = str(Path(__file__).parent / "fixtures" / "scaled_mlp.py") + ":scaled_mlp"


@pytest.mark.unit
def test_fp8_saturation_is_counted_on_the_scaled_values_a_layer_really_holds():
    layer = torch.nn.Linear(4, 16)
    x = 1000 * torch.randn(32, 4, generator=torch.Generator().manual_seed(0))  # beyond E4M3's 448
    fmt = DTYPES.get("float8_e4m3").format
    counts = {}
    for scaling in (True, False):
        mode = emulate(EmulationSettings(fmt, tensor_scaling=scaling))
        with mode:
            out = layer(x)
        out.float().pow(2).sum().backward()
        counts[scaling] = mode.saturations.first()
    assert counts[True] is None  # scaled, every input and output fits
    assert (
        counts[False] is not None
        and counts[False][0] == "forward"
        and counts[False][1] >= int((x.abs() > fmt.max).sum())
    )


def test_fp8_scaling_keeps_an_mlp_of_inputs_near_1000_in_range_and_without_it_the_run_fails_with_the_count(tmp_path):
    grid = [
        "--model",
        SCALED_MLP,
        "-o",
        "scale=1000",
        "--dtype",
        "float8_e4m3",
        "--library",
        "torchdiffeq,native",
        "--scaling",
        "none",
        "--method",
        "euler",
        "--timesteps",
        "4",
        "--noise-batches",
        "0",
        "--no-report",
    ]
    assert run_cli("sweep", *grid, "--out", tmp_path / "scaled").exit_code == 0
    scaled = results(tmp_path / "scaled")
    assert (scaled.status == "ok").all() and scaled.failure_message.isna().all()
    assert run_cli("sweep", *grid, "--no-fp8-scaling", "--out", tmp_path / "unscaled").exit_code == 0
    unscaled = results(tmp_path / "unscaled")
    assert (unscaled.failure_class == "overflow").all()
    assert unscaled.failure_message.str.fullmatch(
        r"\d+ values beyond ±448 saturated in the forward pass \(the format has no infinity\)"
    ).all()
