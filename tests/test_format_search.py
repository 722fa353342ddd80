"""The format search and the answer's first line, on real small sweeps: what they name follows from the Parquet, and a
report over many formats stays short, with figures whose panels do not grow with the number of formats."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.image import imread

from roundoff_analyzer.judging import format_search
from roundoff_analyzer.judging.choice import choose
from roundoff_analyzer.judging.verdict import WELL_UNDER

from .conftest import results, run_cli

SEARCHED = ["e2m3", "e3m3", "e4m3", "e5m3", "e4m6", "e5m10"]


@pytest.fixture(scope="module")
def format_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("formats") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        "-o",
        "d=3",
        "-o",
        "hidden=8",
        "-o",
        "batch=8",
        "--noise-batches",
        "4",
        "--library",
        "native",
        "--scaling",
        "none",
        "--method",
        "euler",
        "--timesteps",
        "4",
        "--dtype",
        ",".join(SEARCHED + ["float16", "bfloat16"]),
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def layout(dtype: str) -> tuple[int, int]:
    named = {"float16": (5, 10), "bfloat16": (8, 7)}
    if dtype in named:
        return named[dtype]
    e, m = re.fullmatch(r"e(\d+)m(\d+)", dtype).groups()
    return int(e), int(m)


def trainable(runs: pd.DataFrame) -> bool:
    return (runs.status == "ok").all() and runs.roundoff_to_noise.max() <= WELL_UNDER


def test_the_narrowest_safe_format_and_exponent_width_follow_from_the_parquet(format_sweep):
    table = results(format_sweep)
    safe = [d for d, runs in table.groupby("dtype") if trainable(runs)]
    # Fewest bits, then fewest exponent bits, then (float16 against e5m10) the smaller roundoff against the noise.
    noise = table.groupby("dtype").roundoff_to_noise.max()
    expected = min(safe, key=lambda d: (1 + sum(layout(d)), layout(d)[0], noise[d]))
    found = format_search.format_results(table)
    assert [f.width for f in found] == sorted(f.width for f in found)
    assert format_search.narrowest_safe(found).dtype == expected
    overflowed = {layout(d)[0] for d in table.loc[table.failure_class == "overflow", "dtype"]}
    widths = sorted({layout(d)[0] for d in table.dtype})
    clear = [w for w in widths if all(o < w for o in overflowed)]
    narrowest = format_search.narrowest_without_overflow(format_search.exponent_widths(table))
    assert (narrowest.exponent_bits if narrowest else None) == (clear[0] if clear else None)

    text = (format_sweep / "report.md").read_text()
    assert f"**Narrowest format safe for training: {expected}**" in text
    # Its margin: how far under the threshold it is, and how well the noise is known (4 batches: ±41% or more).
    u = table.grad_noise_uncertainty.max()
    margin = f"{WELL_UNDER / noise[expected]:.3g}× under the threshold with the noise known to ±{u:.0%}"
    assert margin in text.split(f"**Narrowest format safe for training: {expected}**", 1)[1].split("\n", 1)[0]
    # Each format whose ratio lies within that uncertainty of a threshold is marked in the table.
    failed = set(table.loc[table.status == "failed", "dtype"])
    near = {d for d in set(SEARCHED) - failed if abs(noise[d] - WELL_UNDER) <= u * WELL_UNDER or abs(noise[d] - 1) <= u}
    cells = [c.strip() for line in text.splitlines() if re.match(r"^\| e\d+ ", line) for c in line.split("|")[2:-1]]
    assert sum("†" in c for c in cells) == len(near)
    if clear:
        assert f"**Narrowest exponent width that never overflows: {clear[0]} bits**" in text
    # One table row per exponent width of the emulated formats, one column per mantissa width; no bullet per format.
    rows = [line for line in text.splitlines() if re.match(r"^\| e\d+ ", line)]
    assert [r.split("|")[1].strip() for r in rows] == [f"e{e}" for e in sorted({layout(d)[0] for d in SEARCHED})]
    answer = text.split("## The answer", 1)[1].split("\n## ", 1)[0]
    assert not re.search(r"^- \*\*e\dm\d+\*\*: ", answer, re.M)
    assert (format_sweep / "figures" / "format_search.svg").is_file() and "figures/format_search.png" in text


def test_the_answer_first_names_one_setup_and_what_it_was_judged_on(format_sweep):
    table = results(format_sweep)
    chosen = choose(table)
    # Hardware dtypes come before emulated formats: of float16 and bfloat16 (both 16 bits), the one the rules prefer.
    assert chosen is not None and chosen.answer.dtype in ("float16", "bfloat16")
    text = (format_sweep / "report.md").read_text()
    answer = text.split("## The answer\n\n", 1)[1]
    first = answer.splitlines()[0]
    assert first.startswith(
        f"**Train with {chosen.answer.dtype}**: native, no scaling, euler, n_timesteps 4 under `autocast`"
    )
    noise = table[table.dtype == chosen.answer.dtype].roundoff_to_noise.max()
    assert f"at most {noise:.3g}× the gradient noise" in first
    assert first.endswith("Judged on the initial weights (seed 0, untrained) and synthetic data.")
    # The hardware dtypes keep their sentence each.
    for dtype in ("float16", "bfloat16"):
        assert re.search(rf"^- \*\*{dtype}\*\*: ", answer, re.M)


@pytest.mark.slow  # a 40-format sweep and its report: about 20 s
def test_a_report_over_many_formats_stays_short_with_bounded_figures(tmp_path):
    formats = [f"e{e}m{m}" for e in (5, 6) for m in range(4, 24)]
    out = tmp_path / "many"
    result = run_cli(
        "sweep",
        "--model",
        "linear",
        "--library",
        "native",
        "--scaling",
        "none",
        "--method",
        "euler",
        "--timesteps",
        "2",
        "--dtype",
        ",".join(formats),
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    assert len(text.encode()) < 40_000
    assert max(len(line) for line in text.splitlines() if line.startswith("#")) < 120
    assert max(len(line) for line in text.splitlines() if not line.startswith("|")) < 1_500
    # Panels per exponent width (two here), not per format: the figure is as wide as two panels, whatever the count.
    width = imread(out / "figures" / "error_grad_params.png").shape[1]
    assert width < 2 * 7 * 110 + 400
