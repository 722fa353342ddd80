"""The seed axis (`--seeds`): the grid run on several initialisations, each against its own references; the verdict
judges each setup on its worst seed, the answer states the spread and says first where the label differs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import roundoff_analyzer as ra
from roundoff_analyzer.judging.verdict import judge_setups
from roundoff_analyzer.measuring.columns import ERROR_METRICS
from roundoff_analyzer.report import formatting

from .conftest import TINY_OTFLOW, WIDE_TABLES, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
SEED_GAIN = f"{FIXTURES / 'seed_gain.py'}:seed_gain"
# One cheap setup: the seeds' rows, not the grid, are what these tests read.
SMALL = ["-n", "4", "--method", "euler", "--library", "native", "--dtype", "float16", "--scaling", "none"]
SMALL_SETTINGS = {"timesteps": [4], "method": "euler", "library": "native", "dtype": "float16", "scaling": "none"}
# The columns measured against each seed's own references: equal bit for bit to the single-seed sweep's.
COMPARED = [*ERROR_METRICS, "disc_sol_rel_err", "grad_noise_rel", "roundoff_to_noise"]


def sweep(out: Path, *args: str):
    return run_cli(
        "sweep", "--model", "otflow", *TINY_OTFLOW, *SMALL, "--noise-batches", "2", "--no-timing", "--out", out, *args
    )


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seeds") / "sweep"
    result = sweep(out, "--seeds", "0,1")
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.unit
def test_a_factory_without_a_seed_is_refused_in_one_line_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", f"{FIXTURES / 'seed_gain.py'}:seedless", "--seeds", "0,1", "--out", out)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "seedless" in lines[0] and "takes no `seed` parameter" in lines[0]
    assert not out.exists()


@pytest.mark.unit
def test_seeds_and_a_different_seed_option_are_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", "otflow", "-o", "seed=2", "--seeds", "0,1", "--out", out)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "seed=2" in lines[0] and "--seeds alone" in lines[0], result.stderr
    assert not out.exists()


@pytest.mark.slow
def test_each_seeds_rows_are_the_single_seed_sweeps_bit_for_bit(two_seeds, tmp_path):
    both = pd.read_parquet(two_seeds / "results.parquet")
    assert sorted(both["seed"].unique()) == [0, 1]
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        result = sweep(out, "-o", f"seed={seed}")
        assert result.exit_code == 0, result.output
        alone = pd.read_parquet(out / "results.parquet")
        assert (alone["seed"] == seed).all()
        mine = both[both["seed"] == seed].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine[COMPARED], alone[COMPARED])
    # The seeds' weights differ, so their errors do: the rows are not one seed's written twice.
    assert (
        both.loc[both["seed"] == 0, "grad_params_rel_err"].tolist()
        != both.loc[both["seed"] == 1, "grad_params_rel_err"].tolist()
    )
    params = pd.read_parquet(two_seeds / "param_errors.parquet")
    assert sorted(params["seed"].unique()) == [0, 1]


@pytest.mark.slow
def test_a_seeds_sweep_resumes_and_another_seed_list_is_another_sweep(two_seeds, tmp_path):
    before = pd.read_parquet(two_seeds / "results.parquet")
    again = ra.sweep(
        "otflow",
        out=two_seeds,
        progress=False,
        report=False,
        seeds=[0, 1],
        options={"d": 3, "hidden": 8, "batch": 16},
        noise_batches=2,
        timing=False,
        **SMALL_SETTINGS,
    )
    assert again.run is not None and again.run.n_run == 0
    pd.testing.assert_frame_equal(again.results[COMPARED], before[COMPARED])
    manifest = json.loads((two_seeds / "manifest.json").read_text())
    assert manifest["seeds"] == [0, 1] and manifest["fingerprint"]["seeds"] == [0, 1]
    result = sweep(two_seeds, "--seeds", "0,2")
    assert result.exit_code == 2
    assert "differs in: seeds" in result.stderr


@pytest.mark.slow
def test_check_matches_configurations_on_their_seed(two_seeds, tmp_path):
    passed = run_cli("check", two_seeds, "--baseline", two_seeds)
    assert passed.exit_code == 0, passed.output
    # A baseline from before the seed axis: no seed column; its manifest says it was swept with seed 1.
    baseline = tmp_path / "old"
    baseline.mkdir()
    old = pd.read_parquet(two_seeds / "results.parquet")
    old[old["seed"] == 1].drop(columns="seed").to_parquet(baseline / "results.parquet")
    manifest = json.loads((two_seeds / "manifest.json").read_text())
    (baseline / "manifest.json").write_text(json.dumps({**manifest, "seed": 1, "seeds": [1]}))
    matched = run_cli("check", two_seeds, "--baseline", baseline)
    assert matched.exit_code == 0, matched.output
    # Read as seed 0 instead, the baseline's errors are another initialisation's: they no longer match.
    (baseline / "manifest.json").write_text(json.dumps({**manifest, "seed": 0, "seeds": [0]}))
    other = old[old["seed"] == 1].drop(columns="seed")
    other[list(ERROR_METRICS)] = old.loc[old["seed"] == 1, list(ERROR_METRICS)].to_numpy() / 10
    other.to_parquet(baseline / "results.parquet")
    assert run_cli("check", two_seeds, "--baseline", baseline).exit_code == 1


@pytest.mark.slow
def test_the_verdict_takes_the_worst_seed_and_says_first_that_it_differs(tmp_path):
    # Seed 5 draws a gain above float16's largest finite, seed 3 one of about 1: only seed 5 overflows.
    result = ra.sweep(
        SEED_GAIN,
        out=tmp_path / "gain",
        progress=False,
        seeds=[3, 5],
        timesteps=[8],
        method="rk4",
        library="native",
        dtype="float16",
        scaling="none",
        noise_batches=4,
        timing=False,
    )
    rows = result.results
    each = {seed: judge_setups(rows[rows["seed"] == seed])[0].label for seed in (3, 5)}
    assert each[5] == "unsafe" and each[3] != "unsafe"
    (judged,) = judge_setups(rows)
    assert judged.label == "unsafe" and judged.seeds is not None and judged.seeds.labels == (each[3], each[5])
    answer = (tmp_path / "gain" / "report.md").read_text().split("## The answer\n\n")[1]
    assert answer.startswith(
        f"**The verdict differs between initialisations**: float16 with native with no scaling under `autocast` is "
        f"{each[3]} on seed 3, unsafe on seed 5"
    )


@pytest.mark.slow
def test_the_answer_states_the_spread_over_the_seeds_from_the_table(two_seeds):
    rows = pd.read_parquet(two_seeds / "results.parquet")
    worst = rows.groupby("seed")["roundoff_to_noise"].max()
    spread = formatting.value_range(worst, formatting.in_u)
    report = (two_seeds / "report.md").read_text()
    answer = report.split("## The answer\n\n")[1].split("\n## ")[0]
    assert f"; {spread}× the noise over 2 initialisations" in answer
    assert f"at most {formatting.in_u(worst.max())}× the gradient noise" in answer
    assert "Judged on the initial weights of 2 initialisations (seeds 0 and 1, untrained; each setup on its worst)" in (
        re.sub(r"\s+", " ", answer)
    )


@pytest.mark.slow
def test_show_names_each_rows_seed(two_seeds):
    shown = run_cli("show", two_seeds, columns=WIDE_TABLES)
    assert shown.exit_code == 0, shown.output
    # One setup: the columns that hold one value in every row are said once below the table; the seed's are not.
    header = next(line for line in shown.stdout.splitlines() if line.split()[:1] == ["status"])
    assert header.split()[-1] == "seed"
    rows = [line.split() for line in shown.stdout.splitlines() if line.split()[:1] == ["ok"]]
    assert sorted(row[-1] for row in rows) == ["0", "1"]


@pytest.mark.unit
def test_a_figures_line_follows_the_worst_seed_of_each_configuration():
    from roundoff_analyzer.report.figure_data import worst_seed

    def row(seed, n, err, status="ok"):
        return {
            "library": "torchdiffeq",
            "dtype": "float16",
            "n_timesteps": n,
            "seed": seed,
            "err": err,
            "status": status,
        }

    rows = pd.DataFrame(
        [
            row(0, 8, 1e-3),
            row(1, 8, 3e-3),
            row(0, 32, 5e-3),
            row(1, 32, 2e-3),
            row(0, 64, 1e-4),
            row(1, 64, None, "failed"),
        ]
    )
    drawn, n_seeds = worst_seed(rows, rows["err"])
    assert n_seeds == 2
    # One row per n_timesteps, of the seed with the larger error there; a failed run counts as the worst.
    assert drawn.set_index("n_timesteps")["seed"].to_dict() == {8: 1, 32: 0, 64: 1}
    alone = rows[rows.seed == 0]
    drawn_alone, one = worst_seed(alone, alone["err"])
    assert drawn_alone is alone and one == 1


@pytest.fixture(scope="module")
def gain_seeds(tmp_path_factory) -> ra.SweepResult:
    # Seed 5 draws a gain above float16's largest finite (its float16 runs overflow, scaled or not), seed 3 one of
    # about 1 (its float16 runs all work): every pooled sentence of the report would mix the two.
    return ra.sweep(
        SEED_GAIN,
        out=tmp_path_factory.mktemp("gain") / "sweep",
        progress=False,
        seeds=[3, 5],
        timesteps=[4, 16],
        method="euler",
        library="native",
        dtype=["float16", "float32"],
        scaling=["none", "grad"],
        noise_batches=2,
    )


def _section(report: str, heading: str) -> str:
    return report.split(f"\n## {heading}\n")[1].split("\n## ")[0]


@pytest.mark.slow
def test_the_reports_sections_name_the_seed_where_they_pool_the_initialisations(gain_seeds):
    rows, report = gain_seeds.results, (gain_seeds.folder / "report.md").read_text()
    assert set(rows.loc[rows["status"] == "failed", "seed"]) == {5}
    findings = _section(report, "Key findings")
    ok = rows[rows["status"] == "ok"]
    largest = ok.loc[ok["grad_params_rel_err"].idxmax()]
    assert f"at n = {int(largest['n_timesteps'])}, seed {int(largest['seed'])}." in findings
    assert "among 16 configurations that ran over 2 initialisations" in findings
    # The failure table names each run's seed.
    header = next(line for line in findings.splitlines() if line.startswith("| library"))
    assert "| seed " in header
    # Seed 3's float16 runs worked with every scaling, seed 5's failed with every one: pooled, the rescue read
    # "`grad` worked at n = 4, 16; `grad` failed too at n = 4, 16". Each seed's runs are compared apart.
    rescued = [line for line in findings.split("### Which scaling rescued which dtype")[1].splitlines() if line]
    assert rescued and all("on seed 5" in line and "worked" not in line for line in rescued), rescued
    recommendations = _section(report, "Recommendations")
    assert "native euler on seed 5 at n = 4, 16 (no scaling in this sweep worked there)" in recommendations
    # Each run's time against float32's of its own seed: float32 without scaling is 1.00× itself, which pooled it
    # was not (its time over the faster seed's).
    cost = _section(report, "Cost")
    assert "min – max over n_timesteps (4, 16), methods and seeds (3, 5)" in cost
    float32_row = next(line for line in cost.splitlines() if line.startswith("| float32 | native    | none"))
    assert float32_row.split("|")[5].strip() == "1.00×", float32_row
    overview = _section(report, "Overview")
    assert "× 2 seeds (3, 5) = 16 in all" in overview and "did not finish" not in report
    assert "2 initialisations (seeds 3 and 5)" in overview and "seed=3" not in overview
    worked = _section(report, "What worked and what failed")
    assert "- native euler float16 none (on seed 3)" in worked
    assert "- native euler float16 none: overflow at n = 4, 16 (on seed 5)" in worked
    assert "n = 4, 4" not in report


@pytest.mark.slow
def test_the_answers_code_builds_its_setups_worst_seed_and_the_timing_says_the_seed_it_timed(gain_seeds):
    from .test_handed_code import _assert_runs

    rows, report = gain_seeds.results, (gain_seeds.folder / "report.md").read_text()
    answer = gain_seeds.answers["float32"]
    assert answer["train"] and answer["library"] == "native" and answer["scaling"] == "none"
    setup = rows[(rows["dtype"] == "float32") & (rows["library"] == "native") & (rows["scaling"] == "none")]
    worst = int(setup.groupby("seed")["roundoff_to_noise"].max().idxmax())
    assert answer["judged_seed"] == worst
    assert f"seed={worst}, d=4" in answer["code"]
    assert f"# seed={worst}: the initialisation this setup was judged on, its worst of seeds 3 and 5" in answer["code"]
    _assert_runs(gain_seeds, "float32", gain_seeds.folder, batches=3)  # y0, then batches 1 and 2
    timing = pd.read_parquet(gain_seeds.folder / "timing.parquet")
    assert set(timing["seed"]) == {worst}
    said = f"timed on seed {worst}'s initialisation"
    assert said in _section(report, "Cost") and said in report.split("## The answer\n\n")[1].split("\n## ")[0]


@pytest.mark.unit
def test_error_growth_is_one_line_per_setup_over_the_seeds_each_ratio_within_one_seed():
    from roundoff_analyzer.report.sections.key_findings import error_growth
    from roundoff_analyzer.report.sections.recommendations import growth_contrasts

    def row(library, seed, n, err):
        setup = {"method": "rk4", "dtype": "bfloat16", "scaling": "none", "mode": "autocast"}
        return {"library": library, **setup, "seed": seed, "n_timesteps": n, "status": "ok", "grad_params_rel_err": err}

    # Seed 1's errors are 10× seed 0's: a ratio across seeds (seed 1's n = 32 over seed 0's n = 8) would read 40×.
    rows = pd.DataFrame(
        [
            row("torchdiffeq", 0, 8, 1e-3),
            row("torchdiffeq", 0, 32, 4e-3),
            row("torchdiffeq", 1, 8, 1e-2),
            row("torchdiffeq", 1, 32, 3e-2),
            row("native", 0, 8, 1e-3),
            row("native", 0, 32, 1e-3),
            row("native", 1, 8, 1e-2),
            row("native", 1, 32, 1e-2),
        ]
    )
    growth = [line for line in error_growth(rows, with_mode=False) if line.startswith("- ")]
    assert growth == [
        "- bfloat16 torchdiffeq rk4 (scaling none, seeds 0 and 1, each its own): the parameter-gradient error grows "
        "3 – 4× from n = 8 to n = 32 (1.00e-03 – 1.00e-02 → 4.00e-03 – 3.00e-02)."
    ]
    (contrast,) = growth_contrasts(rows, with_mode=False)
    assert "(rk4, bfloat16, scaling none, seeds 0 and 1, each its own): torchdiffeq's" in contrast
    assert "grows 3 – 4× from n = 8 to n = 32" in contrast and "40" not in contrast
    single = rows[rows["seed"] == 0]
    (alone,) = [line for line in error_growth(single, with_mode=False) if line.startswith("- ")]
    assert "(scaling none): the parameter-gradient error grows 4× " in alone
