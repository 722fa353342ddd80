"""The timing pass after a sweep: the setups the answer compares timed again, interleaved, into timing.parquet; the
answer's cost words read from that table; a folder without it reads as before."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import roundoff_analyzer as ra
from roundoff_analyzer.execution.timing_pass import MAX_REPEATS, MIN_REPEATS, _within_budget
from roundoff_analyzer.judging.choice import choose
from roundoff_analyzer.judging.timed_cost import answer_config, float32_of
from roundoff_analyzer.report import write_report

from .conftest import run_cli

KEYS = ["library", "method", "n_timesteps", "dtype", "scaling", "mode", "keep_float32"]


@pytest.fixture(scope="module")
def timed_sweep(tmp_path_factory):
    """float16 and bfloat16 with the native solver on a tiny otflow, rk4 at n_timesteps 4 and 8: no float32 in the
    grid, so the pass times float32 (native and torchdiffeq) itself."""
    out = tmp_path_factory.mktemp("timed") / "sweep"
    result = ra.sweep(
        model="otflow",
        options={"d": 3, "hidden": 8, "batch": 16},
        device="cpu",
        out=out,
        timesteps=[4, 8],
        method="rk4",
        library="native",
        dtype=["float16", "bfloat16"],
        scaling="none",
        progress=False,
    )
    return result


def _rounds(timing: pd.DataFrame, config: dict) -> pd.Series:
    match = (timing[list(config)] == pd.Series(config)).all(axis=1)
    rows = timing[match]
    return (rows["time_forward_s"] + rows["time_backward_s"]).set_axis(rows["repeat"]).sort_index()


@pytest.mark.slow
def test_the_pass_times_the_answers_setups_interleaved_at_least_five_times(timed_sweep):
    timing = timed_sweep.timing
    assert timing is not None
    results = timed_sweep.results
    chosen = choose(results)
    assert chosen is not None
    first = answer_config(results, chosen.answer, chosen.answer.n_timesteps)
    assert first is not None
    setups = timing[KEYS].drop_duplicates()
    # The choice and float32 with its library, at the choice's n_timesteps, are always timed; float32 did not run in
    # the sweep.
    timed = {tuple(row) for row in setups.itertuples(index=False)}
    assert tuple(first[k] for k in KEYS) in timed
    assert tuple(float32_of(first)[k] for k in KEYS) in timed
    assert not (results["dtype"] == "float32").any()
    repeats = int(timing["repeat"].max())
    assert repeats >= MIN_REPEATS
    # Every setup ran once in every round, one round after another (A B A B ..., each round starting further on).
    per_setup = timing.groupby(KEYS)["repeat"].apply(sorted)
    assert all(r == list(range(1, repeats + 1)) for r in per_setup)
    assert timing["repeat"].is_monotonic_increasing
    starts = timing.groupby("repeat").head(1)[KEYS].drop_duplicates()
    assert len(starts) == min(len(setups), repeats)
    assert (timing["time_forward_s"] > 0).all() and (timing["time_backward_s"] > 0).all()
    assert timing["load_average_1m"].notna().all()
    manifest = timed_sweep.manifest
    # Both recorded; not compared: the choice and float32 are timed MIN_REPEATS times even where that takes longer
    # than the sweep's own share allows (a small sweep's pass may outlast the sweep: CI saw 2.99 s against 2.14 s).
    assert manifest["timing_pass_s"] > 0 and manifest["timing_sweep_s"] > 0


@pytest.mark.slow
def test_the_cost_words_are_the_tables_median_and_range(timed_sweep):
    timing, results = timed_sweep.timing, timed_sweep.results
    chosen = choose(results)
    assert chosen is not None
    a = chosen.answer
    first = answer_config(results, a, a.n_timesteps)
    mine, float32 = _rounds(timing, first), _rounds(timing, float32_of(first))
    ratios = (mine / float32).dropna()  # round by round
    low, median, high = ratios.min(), ratios.median(), ratios.max()
    span = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f}"
    said = f"{a.dtype} with native takes {median:.2f}× float32's time ({span}"
    sentence = timed_sweep.answers[a.dtype]["sentence"]
    assert said in sentence
    assert f"rk4, n_timesteps {a.n_timesteps}, forward + backward, {len(mine)} interleaved repeats" in sentence
    report = (timed_sweep.folder / "report.md").read_text()
    assert said in report
    # Said first, before why, where it does not pay; else where it always was, in the dtype's sentence.
    headline = next(line for line in report.splitlines() if line.startswith("**Train with"))
    first_said = f"On this CPU {said}, {len(mine)} repeats of rk4 at n_timesteps {a.n_timesteps}"
    assert (first_said in headline) == (median > 1)
    # The cost table says which rows were timed again, and how often.
    assert f"rk4, n {a.n_timesteps}: {len(mine)} repeats" in report
    assert "Timed again after the sweep" in report


@pytest.mark.slow
def test_a_folder_without_the_timing_table_reads_as_before(timed_sweep, tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    for name in ("results.parquet", "param_errors.parquet", "profile.parquet"):
        (folder / name).write_bytes((timed_sweep.folder / name).read_bytes())
    manifest = json.loads((timed_sweep.folder / "manifest.json").read_text())
    for key in ("timing_pass_s", "timing_sweep_s"):
        manifest.pop(key)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    report = write_report(folder).read_text()
    assert "timed again" not in report.lower()
    assert "Cost on cpu: " in report  # the words of one timing per run
    assert ra.load(folder).timing is None
    shown = run_cli("show", folder)
    assert shown.exit_code == 0, shown.output
    assert "timed again" not in shown.output


@pytest.mark.slow
def test_show_says_the_timed_words(timed_sweep):
    shown = run_cli("show", timed_sweep.folder, columns=400)
    assert shown.exit_code == 0, shown.output
    assert "timed again after the sweep" in shown.output


@pytest.mark.unit
def test_repeats_fit_the_budget_and_the_setups_named_last_go_first():
    seconds = {0: 1.0, 1: 0.5, 2: 0.5, 3: 2.0}
    # Five rounds of the first three fit in 10 s; the fourth's do not.
    assert _within_budget(seconds, 10.0) == ([0, 1, 2], MIN_REPEATS)
    assert _within_budget(seconds, 1000.0) == ([0, 1, 2, 3], MAX_REPEATS)
    assert _within_budget(seconds, 15.0) == ([0, 1, 2], 7)
    # The choice and float32 are timed the minimum number of times even where that is over the budget.
    assert _within_budget(seconds, 0.1) == ([0, 1], MIN_REPEATS)
    # A setup that failed its warm-up is not among them.
    assert _within_budget({0: 1.0, 2: 0.5}, 100.0) == ([0, 2], MAX_REPEATS)
