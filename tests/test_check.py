"""`roundoff check` on a real small sweep, against baselines doctored from a copy of its own results."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS, Configuration
from roundoff_analyzer.core.errors import InputError
from roundoff_analyzer.judging.check import compare, parse_tolerances
from roundoff_analyzer.judging.yardstick_check import DISC_COLUMNS, YARDSTICK_COLUMNS
from roundoff_analyzer.measuring.columns import ERROR_METRICS

from .conftest import TINY_OTFLOW, WIDE_TABLES, run_cli

REPO = Path(__file__).resolve().parent.parent


def baseline_from(sweep: Path, folder: Path, edit=None) -> Path:
    """A baseline folder holding a copy of the sweep's results, edited by `edit(frame) -> frame`."""
    folder.mkdir()
    results = pd.read_parquet(sweep / "results.parquet")
    (edit(results) if edit else results).to_parquet(folder / "results.parquet", index=False)
    return folder


def label(row) -> str:
    return Configuration(**{c: row[c] for c in CONFIG_COLUMNS}).label()


def ok_rows(results: pd.DataFrame) -> pd.DataFrame:
    ok = results[results["status"] == "ok"]
    assert len(ok) >= 2, "the tiny sweep should have ok configurations to regress"
    return ok


def test_a_sweep_checked_against_itself_passes(tiny_sweep, tmp_path):
    result = run_cli("check", tiny_sweep, "--baseline", tiny_sweep, "--junit", tmp_path / "check.xml")
    assert result.exit_code == 0, result.output
    assert "passed" in result.stdout
    suite = ET.parse(tmp_path / "check.xml").getroot().find("testsuite")
    assert suite.get("failures") == "0"


def test_errors_ten_times_smaller_in_the_baseline_fail_and_name_the_configurations(tiny_sweep, tmp_path):
    def shrink(frame):
        frame[list(ERROR_METRICS)] = frame[list(ERROR_METRICS)] / 10
        return frame

    baseline = baseline_from(tiny_sweep, tmp_path / "baseline", shrink)
    # read from the changes table
    result = run_cli(
        "check", tiny_sweep, "--baseline", baseline, "--markdown", tmp_path / "check.md", columns=WIDE_TABLES
    )
    assert result.exit_code == 1, result.output
    markdown = (tmp_path / "check.md").read_text()
    for _, row in ok_rows(pd.read_parquet(tiny_sweep / "results.parquet")).iterrows():
        assert label(row) in result.stdout and label(row) in markdown
    assert "### Regressions" in markdown and "(x10)" in markdown

    metrics = compare(
        pd.read_parquet(tiny_sweep / "results.parquet"), pd.read_parquet(baseline / "results.parquet")
    ).metrics
    assert metrics["ratio"].dropna().between(9.99, 10.01).all() and len(metrics) > 0


def test_a_configuration_that_was_ok_and_now_failed_fails(tiny_sweep, tmp_path):
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    broken = ok_rows(results).iloc[0]
    now = results.copy()
    now.loc[broken.name, ["status", "failure_class"]] = ["failed", "overflow"]
    now.loc[broken.name, list(ERROR_METRICS)] = None
    now.to_parquet(tmp_path / "now.parquet", index=False)

    # read from the changes table
    result = run_cli("check", tmp_path / "now.parquet", "--baseline", tiny_sweep, columns=WIDE_TABLES)
    assert result.exit_code == 1, result.output
    assert label(broken) in result.stdout and "was ok, now failed (overflow)" in result.stdout

    # The other way round it is an improvement, and the check passes.
    result = run_cli("check", tiny_sweep, "--baseline", tmp_path / "now.parquet")
    assert result.exit_code == 0, result.output
    assert "improvement" in result.stdout


def test_a_mismatched_grid_is_reported_as_missing_and_new(tiny_sweep, tmp_path):
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    dropped, extra = ok_rows(results).iloc[0], ok_rows(results).iloc[1]
    baseline = baseline_from(tiny_sweep, tmp_path / "baseline", lambda frame: frame.drop(index=extra.name))
    now = results.drop(index=dropped.name)
    now.to_parquet(tmp_path / "now.parquet", index=False)

    comparison = compare(now, pd.read_parquet(baseline / "results.parquet"))
    by_label = comparison.configurations.set_index("label")
    assert by_label.loc[label(dropped), "presence"] == "baseline only"
    assert by_label.loc[label(dropped), "verdict"] == "regression"
    assert by_label.loc[label(extra), "presence"] == "new only"
    assert by_label.loc[label(extra), "verdict"] == "new"

    result = run_cli("check", tmp_path / "now.parquet", "--baseline", baseline, "--markdown", tmp_path / "check.md")
    assert result.exit_code == 1, result.output
    markdown = (tmp_path / "check.md").read_text()
    assert "missing from the new results (was ok)" in markdown
    assert "### New configurations (1)" in markdown and label(extra) in markdown

    # A configuration missing now that was not ok in the baseline is reported, but is no regression.
    def failed_then(frame):
        frame.loc[dropped.name, "status"] = "failed"
        return frame

    failed_before = baseline_from(tiny_sweep, tmp_path / "failed-before", failed_then)
    result = run_cli("check", tmp_path / "now.parquet", "--baseline", failed_before)
    assert result.exit_code == 0, result.output
    assert "missing" in result.stdout


def test_grids_with_nothing_in_common_are_one_line_naming_what_differs(tiny_sweep, tmp_path):
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    results.assign(mode="pure").to_parquet(tmp_path / "pure.parquet", index=False)
    result = run_cli("check", tmp_path / "pure.parquet", "--baseline", tiny_sweep)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "no configuration in common (mode: baseline autocast, now pure)" in line
    assert result.stdout == "", "nothing but the line: no table of every configuration as missing and new"


def test_the_summary_counts_in_words_that_agree_with_the_numbers(tiny_sweep, tmp_path):
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    ok = ok_rows(results)
    worse = results.copy()
    worse.loc[ok.index[:1], "grad_params_rel_err"] *= 100
    summary = compare(worse, results).summary()
    assert summary.startswith(f"{len(results)} configurations: 1 regression, ") and "regressions" not in summary
    worse.loc[ok.index[:2], "grad_params_rel_err"] *= 100
    assert ", 2 regressions, " in f", {compare(worse, results).summary().split(': ', 1)[1]}"
    one = results.loc[ok.index[:1]]
    assert compare(one, one).summary() == "1 configuration: 1 unchanged"


def test_junit_has_one_test_case_per_configuration(tiny_sweep, tmp_path):
    results = pd.read_parquet(tiny_sweep / "results.parquet")
    broken = ok_rows(results).iloc[0]
    baseline = baseline_from(
        tiny_sweep, tmp_path / "baseline", lambda frame: frame.assign(sol_rel_err=frame["sol_rel_err"] / 10)
    )
    skipped_both = results.copy()
    skipped_both.loc[broken.name, "status"] = "skipped"
    skipped_both.to_parquet(baseline / "skipped.parquet", index=False)

    assert run_cli("check", tiny_sweep, "--baseline", baseline, "--junit", tmp_path / "check.xml").exit_code == 1
    suite = ET.parse(tmp_path / "check.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(results) == int(suite.get("tests"))
    failures = [case for case in cases if case.find("failure") is not None]
    assert int(suite.get("failures")) == len(failures) > 0
    assert {case.get("classname") for case in cases} == {
        f"roundoff.otflow.{lib}" for lib in results["library"].unique()
    }
    assert {case.get("name") for case in cases} == {label(row) for _, row in results.iterrows()}

    # A configuration skipped on both sides is a skipped test case.
    assert (
        run_cli(
            "check",
            baseline / "skipped.parquet",
            "--baseline",
            baseline / "skipped.parquet",
            "--junit",
            tmp_path / "skipped.xml",
        ).exit_code
        == 0
    )
    suite = ET.parse(tmp_path / "skipped.xml").getroot().find("testsuite")
    assert suite.get("skipped") == "1" and len(suite.findall("testcase/skipped")) == 1


def test_tolerances_are_overridable_per_metric(tiny_sweep, tmp_path):
    baseline = baseline_from(
        tiny_sweep, tmp_path / "baseline", lambda frame: frame.assign(sol_rel_err=frame["sol_rel_err"] / 10)
    )
    assert run_cli("check", tiny_sweep, "--baseline", baseline).exit_code == 1
    for loosened in (["--tolerance", "sol_rel_err=10.5"], ["--factor", "11"], ["--floor-u", "sol_rel_err=100"]):
        result = run_cli("check", tiny_sweep, "--baseline", baseline, *loosened)
        assert result.exit_code == 0, (loosened, result.output)

    tolerances = parse_tolerances(["3", "grad_params_rel_err=5"], ["grad_params_rel_err=4"])
    assert (tolerances["sol_rel_err"].factor, tolerances["sol_rel_err"].floor_u) == (3.0, 0.25)
    assert (tolerances["grad_params_rel_err"].factor, tolerances["grad_params_rel_err"].floor_u) == (5.0, 4.0)
    for factors, floors in ((["nope=2"], []), (["two"], []), (["0.5"], []), ([], ["-1"])):
        with pytest.raises(InputError):
            parse_tolerances(factors, floors)


def test_update_baseline_accepts_improvements_and_refuses_regressions(tiny_sweep, tmp_path):
    worse = baseline_from(
        tiny_sweep,
        tmp_path / "baseline",
        lambda frame: frame.assign(grad_params_rel_err=frame["grad_params_rel_err"] * 10),
    )
    result = run_cli("check", tiny_sweep, "--baseline", worse, "--update-baseline")
    assert result.exit_code == 0 and "improvement" in result.stdout, result.output
    assert "baseline updated" in result.stdout
    assert (worse / "results.parquet").read_bytes() == (tiny_sweep / "results.parquet").read_bytes()
    assert (worse / "manifest.json").read_bytes() == (tiny_sweep / "manifest.json").read_bytes()

    better = baseline_from(
        tiny_sweep,
        tmp_path / "better",
        lambda frame: frame.assign(grad_params_rel_err=frame["grad_params_rel_err"] / 10),
    )
    before = (better / "results.parquet").read_bytes()
    result = run_cli("check", tiny_sweep, "--baseline", better, "--update-baseline")
    assert result.exit_code == 1 and "baseline not updated" in result.stdout
    assert (better / "results.parquet").read_bytes() == before


def _scaled_yardsticks(columns, factor):
    def edit(frame):
        frame[list(columns)] = frame[list(columns)] * factor
        return frame

    return edit


def test_a_reference_that_moved_is_named_as_moved_not_its_errors(tiny_sweep, tmp_path):
    """A baseline whose float64 references were 1.5 times as far from the fine reference, with errors 10 times as
    large: the errors look improved, and the check names the references as what changed instead."""

    def edit(frame):
        frame = _scaled_yardsticks(DISC_COLUMNS, 1.5)(frame)
        return frame.assign(grad_y0_rel_err=frame["grad_y0_rel_err"] * 10)

    baseline = baseline_from(tiny_sweep, tmp_path / "baseline", edit)
    result = run_cli("check", tiny_sweep, "--baseline", baseline, columns=WIDE_TABLES)
    assert result.exit_code == 1, result.output
    comparison = compare(pd.read_parquet(tiny_sweep / "results.parquet"), pd.read_parquet(baseline / "results.parquet"))
    ok = comparison.configurations[comparison.configurations["status_new"] == "ok"]
    assert (ok["verdict"] == "reference moved").all() and comparison.counts()["improvement"] == 0
    assert comparison.regressed and "references moved" in result.stdout  # it fails the check, as a regression does
    assert ok["reasons"].str.startswith("its float64 reference changed (disc_").all()
    assert ok["reasons"].str.contains("not compared with the baseline's").all()
    assert set(comparison.metrics["metric"]) <= set(DISC_COLUMNS)
    assert "improvement" not in result.stdout and "the float64 reference of native changed" in result.stdout


def test_a_yardstick_moved_as_little_as_between_two_cpus_is_unchanged(tiny_sweep, tmp_path):
    """Every disc_* and fine_ref_* moved by 1e-5 of itself, more than between AVX-512 and scalar kernels (6e-6): the
    check passes and says nothing of the references."""
    baseline = baseline_from(tiny_sweep, tmp_path / "baseline", _scaled_yardsticks(YARDSTICK_COLUMNS, 1 + 1e-5))
    result = run_cli("check", tiny_sweep, "--baseline", baseline, columns=WIDE_TABLES)
    assert result.exit_code == 0, result.output
    assert "reference" not in result.stdout


def test_a_fine_reference_that_moved_is_named_before_the_configurations(tiny_sweep, tmp_path):
    def edit(frame):
        return frame.assign(
            fine_ref_final_order=frame["fine_ref_final_order"] + 1.5, **{c: frame[c] * 2 for c in DISC_COLUMNS}
        )

    baseline = baseline_from(tiny_sweep, tmp_path / "baseline", edit)
    result = run_cli(
        "check", tiny_sweep, "--baseline", baseline, "--markdown", tmp_path / "check.md", columns=WIDE_TABLES
    )
    assert result.exit_code == 1, result.output
    said = [line for line in result.stdout.splitlines() if line.startswith("the fine reference changed")]
    assert len(said) == 1 and "observed order in the final state" in said[0], result.stdout
    assert "The fine reference changed (observed order in the final state" in (tmp_path / "check.md").read_text()
    comparison = compare(pd.read_parquet(tiny_sweep / "results.parquet"), pd.read_parquet(baseline / "results.parquet"))
    ok = comparison.configurations[comparison.configurations["status_new"] == "ok"]
    assert ok["reasons"].str.startswith("the fine reference changed (disc_").all()


# After each step of examples/unrolled_solver.py, whatever the dtype (the float64 reference's too).
PLANTED = "    y = y.to(torch.bfloat16).to(state_dtype)  # the planted change\n            states.append(y)\n"


@pytest.mark.slow  # two sweeps of 8 configurations of a library of one's own, and a check: 15-50 s
def test_a_planted_change_that_rounds_the_float64_reference_is_named_as_the_cause(tmp_path, monkeypatch):
    """A solver library of one's own swept as a baseline, then changed to round every state to bfloat16, the float64
    reference's too: its bfloat16 runs, measured against a reference rounded like them, look unchanged or improved.
    The check names the reference as the cause in every configuration, and where its error now grows with n."""
    monkeypatch.chdir(tmp_path)
    honest = (REPO / "examples" / "unrolled_solver.py").read_text()
    assert honest.count("    states.append(y)\n") == 1
    grid = [
        "--model",
        "otflow",
        *TINY_OTFLOW,
        "--timesteps",
        "4,16",
        "--library",
        "solver.py:library",
        "--method",
        "euler,rk4",
        "--dtype",
        "float16,bfloat16",
        "--scaling",
        "none",
        "--no-report",
    ]
    # Each sweep in a process of its own, as CI runs them (one process loads a library's file once).
    for source, out in ((honest, "baseline"), (honest.replace("    states.append(y)\n", PLANTED), "new")):
        Path("solver.py").write_text(source)
        swept = subprocess.run(
            [sys.executable, "-m", "roundoff_cli", "sweep", *grid, "--out", out],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            timeout=600,
        )
        assert swept.returncode == 0, swept.stderr

    checked = run_cli("check", "new", "--baseline", "baseline", columns=WIDE_TABLES)
    assert checked.exit_code == 1, checked.output
    comparison = compare(pd.read_parquet("new/results.parquet"), pd.read_parquet("baseline/results.parquet"))
    assert (comparison.configurations["verdict"] == "reference moved").all(), comparison.configurations
    assert comparison.configurations["reasons"].str.startswith("its float64 reference changed").all()
    assert "improvement" not in checked.stdout and "unchanged" not in checked.stdout
    (line,) = [text for text in checked.stdout.splitlines() if text.startswith("the float64 reference of solver.py")]
    assert "changed in 8 configurations" in line and "grows with n_timesteps (rk4:" in line


def absent(tmp: Path) -> Path:
    return tmp / "absent"


def not_parquet(tmp: Path) -> Path:
    (tmp / "notes.parquet").write_text("not parquet")
    return tmp / "notes.parquet"


def not_results(tmp: Path) -> Path:
    pd.DataFrame({"model": ["otflow"]}).to_parquet(tmp / "other.parquet")
    return tmp / "other.parquet"


@pytest.mark.parametrize(
    "make_baseline, message",
    [(absent, "no results at"), (not_parquet, "cannot read"), (not_results, "is not a results table")],
)
def test_bad_input_exits_2_with_one_line(tiny_sweep, tmp_path, make_baseline, message):
    result = run_cli("check", tiny_sweep, "--baseline", make_baseline(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_bad_tolerance_exits_2_with_one_line(tiny_sweep):
    result = run_cli("check", tiny_sweep, "--baseline", tiny_sweep, "--tolerance", "no_such_err=2")
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "unknown metric" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def ci_check(results: Path, baseline: Path) -> subprocess.CompletedProcess:
    """The check step of .ci/run, run as CI runs it."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", str(REPO / ".ci" / "check_baseline.sh"), str(results), str(baseline)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )


def test_the_ci_check_step_goes_red_on_a_regression(tiny_sweep, tmp_path):
    assert ci_check(tiny_sweep, tiny_sweep).returncode == 0
    doctored = baseline_from(
        tiny_sweep, tmp_path / "baseline", lambda frame: frame.assign(grad_y0_rel_err=frame["grad_y0_rel_err"] / 10)
    )
    red = ci_check(tiny_sweep, doctored)
    assert red.returncode == 1, red.stdout + red.stderr
    assert "regression" in red.stdout


@pytest.mark.unit
def test_ci_runs_the_check_step_without_swallowing_its_exit_code():
    script = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in script
    steps = [line for line in script.splitlines() if "check_baseline.sh" in line and not line.lstrip().startswith("#")]
    assert steps, ".ci/run should run .ci/check_baseline.sh"
    assert all("||" not in line and "; true" not in line and "&" not in line for line in steps)
    assert (REPO / "reports" / "baselines" / "otflow-ci" / "results.parquet").is_file()
