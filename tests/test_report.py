"""`roundoff report` and `roundoff show` on real small sweeps: what the report says, and that its numbers are the
Parquet's.

The checks read the report as a reader would: its markdown tables are parsed back into numbers and each is compared
with the Parquet value it claims to show, at the precision it is printed with.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from matplotlib.image import imread

from roundoff_analyzer.axes.dtypes import DTYPES
from roundoff_analyzer.judging import verdict
from roundoff_analyzer.measuring.failures import FAILURE_CLASSES
from roundoff_analyzer.report import FIGURES, draw_figures, read_sweep_folder
from roundoff_analyzer.report.causes import explain
from roundoff_analyzer.report.figure_files import save_figures
from roundoff_analyzer.report.figures import FAILED_LABEL, RECOVERED_LABEL, adjoint_range_figure, error_figure
from roundoff_analyzer.report.findings import FailureGroup, overflow_progressions
from roundoff_analyzer.report.formatting import markdown_table
from roundoff_analyzer.report.recovered import recovered_overflows
from roundoff_analyzer.report.sections.answer_code import code_method
from roundoff_analyzer.report.sections.recommendations import recommendations
from roundoff_analyzer.report.tables import failure_group_table

from .conftest import results, run_cli

SETUP = ["library", "method", "dtype", "scaling"]
# Three significant digits are printed: a printed value is within half a unit of its third digit of the true one.
PRINTED = 5.01e-3
# Header of a report table -> the results column it shows.
RUN_COLUMNS = {
    "phase": "overflow_phase",
    "step": "overflow_step",
    "largest finite adjoint": "max_abs_adjoint",
    "reference largest adjoint": "reference_max_abs_adjoint",
    "dtype max": "dtype_max",
    "gradient w.r.t. y0 error": "grad_y0_rel_err",
    "parameter gradient error": "grad_params_rel_err",
    "final scale": "final_scale",
    "retries": "scale_retries",
    "message": "failure_message",
}
RANGE_COLUMNS = {
    "solution": "sol_rel_err",
    "gradient w.r.t. y0": "grad_y0_rel_err",
    "parameter gradient": "grad_params_rel_err",
}
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]\d+)?(?![\w.])")


# --- reading a report back ----------------------------------------------------------------------------------------


def report_text(folder: Path) -> str:
    return (folder / "report.md").read_text()


def split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def tables_of(text: str) -> list[tuple[str, list[str], list[dict[str, str]]]]:
    """(the heading above it, headers, rows) for every markdown table."""
    found, heading, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i]
        if lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            headers = split_row(lines[i])
            i += 2
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(headers, split_row(lines[i]))))
                i += 1
            found.append((heading, headers, rows))
            continue
        i += 1
    return found


def printed_as(cell: str, value) -> bool:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    if cell == "—":
        return missing
    if missing:
        return False
    if isinstance(value, str):
        return cell == value
    return math.isclose(float(cell), float(value), rel_tol=PRINTED)


def printed_to_decimals(cell: str, value: float) -> bool:
    """A number printed with a fixed count of decimals (the timed ratios' `.2f`): within half its last digit, so a
    ratio below 1 keeps the same absolute precision as one above it."""
    decimals = len(cell.partition(".")[2])
    return abs(float(cell) - float(value)) <= 0.5 * 10.0**-decimals + 1e-12


def printed_range(cell: str, values: pd.Series) -> bool:
    values = values.dropna()
    if cell == "—":
        return values.empty
    low, _, high = cell.partition(" – ")
    return printed_as(low, values.min()) and printed_as(high or low, values.max())


def check_verdict_row(row: dict, table: pd.DataFrame) -> int:
    """One setup (dtype, library, scaling): its largest errors and ratios over the runs without failure."""
    runs = table[(table.dtype == row["dtype"]) & (table.library == row["library"]) & (table.scaling == row["scaling"])]
    ok = runs[runs.status == "ok"]
    assert row["ok"] == f"{len(ok)} of {(runs.status != 'skipped').sum()}", row
    assert printed_as(row["param. gradient roundoff (max)"], ok.grad_params_rel_err.max() if len(ok) else None), row
    # "roundoff / noise at batch 16 (max)"; a cell near a threshold says so after its number: "0.107 (near 0.1)"
    to_noise = next(cell for header, cell in row.items() if header.startswith("roundoff / noise"))
    assert printed_as(
        to_noise.split(" (near ")[0], ok.roundoff_to_noise.max() if ok.roundoff_to_noise.notna().any() else None
    ), row
    return 3


def check_context_row(row: dict, table: pd.DataFrame) -> int:
    """One grid (library, method, n_timesteps): its discretisation errors, and each dtype's roundoff range."""
    grid = table[
        (table.library == row["library"])
        & (table.method == row["method"])
        & (table.n_timesteps == int(row["n_timesteps"]))
    ]
    checked = 0
    for header, roundoff, disc in (
        ("solution", "sol_rel_err", "disc_sol_rel_err"),
        ("param. gradient", "grad_params_rel_err", "disc_grad_params_rel_err"),
    ):
        assert grid[disc].nunique() == 1 and printed_as(
            row[f"discretisation: {header}"].removeprefix("≈ "), grid[disc].iloc[0]
        ), row
        for dtype in grid.dtype.unique():
            ok = grid[(grid.dtype == dtype) & (grid.status == "ok")]
            assert printed_range(row[f"{dtype} roundoff: {header}"], ok[roundoff]), (dtype, header, row)
            checked += 1
        checked += 1
    return checked


def check_timed_row(row: dict[str, str], timing: pd.DataFrame) -> int:
    """A row of the setups timed again after the sweep: median (min – max) of their forward + backward, and repeats."""
    keys = ["dtype", "library", "scaling", "method"]
    runs = timing[(timing[keys] == pd.Series({k: row[k] for k in keys})).all(axis=1)]
    runs = runs[runs.n_timesteps == int(row["n_timesteps"])]
    seconds = runs.time_forward_s + runs.time_backward_s
    median, _, spread = row["forward + backward (s)"].partition(" (")
    assert printed_as(median, seconds.median()), row
    assert printed_range(spread.rstrip(")"), seconds), row
    assert int(row["repeats"]) == len(runs) == runs.repeat.nunique(), row
    return 2


def check_numbers_against(
    text: str, table: pd.DataFrame, parameters: pd.DataFrame, timing: pd.DataFrame | None = None
) -> int:
    """Every cell of every table in the report against the results (and the timing table, where the folder has one);
    returns how many cells were checked."""
    checked = 0
    for heading, headers, rows in tables_of(text):
        for row in rows:
            if heading == "## Cost" and "repeats" in headers:
                assert timing is not None
                checked += check_timed_row(row, timing)
                continue
            if heading == "## Verdict":
                checked += check_verdict_row(row, table)
                continue
            if heading.startswith("## Roundoff against"):
                checked += check_context_row(row, table)
                continue
            if heading == "## Cost":
                ok = table[
                    (table.dtype == row["dtype"])
                    & (table.library == row["library"])
                    & (table.scaling == row["scaling"])
                    & (table.status == "ok")
                ]
                assert printed_range(row["forward + backward (s)"], ok.time_forward_s + ok.time_backward_s), row
                checked += 1
                continue
            setup = (table[SETUP] == pd.Series({c: row[c] for c in SETUP})).all(axis=1)
            if "parameter" in headers:
                # A parameter's largest gradient error over the runs without failure, and a run where it was that large.
                ok = table.loc[table.status == "ok", ["library", "method", "n_timesteps", "dtype", "scaling", "mode"]]
                runs = parameters[
                    (parameters.parameter == row["parameter"]) & (parameters.dtype == row["dtype"])
                ].merge(ok)
                assert printed_as(row["largest error"], runs.grad_rel_err.max()), row
                run = runs[(runs[SETUP] == pd.Series({c: row[c] for c in SETUP})).all(axis=1)]
                run = run[run.n_timesteps == int(row["n_timesteps"])]
                assert printed_as(row["largest error"], run.grad_rel_err.iloc[0]), row
                assert printed_as(row["in u"], run.grad_rel_err_over_u.iloc[0]), row
                checked += 2
            elif "n_timesteps" in headers and "→" not in row["n_timesteps"]:
                # One configuration per row (a failure group's runs).
                match = table[setup & (table["n_timesteps"] == int(row["n_timesteps"]))]
                assert len(match) == 1, row
                for header, column in RUN_COLUMNS.items():
                    if header in row:
                        assert printed_as(row[header], match.iloc[0][column]), (heading, header, row)
                        checked += 1
            elif "ratio" in headers:
                # The gradient error at the smallest and the largest n_timesteps a setup ran without failure.
                ok = table[setup & (table["status"] == "ok")].sort_values("n_timesteps")
                first, last = ok.iloc[0], ok.iloc[-1]
                assert row["n_timesteps"] == f"{first['n_timesteps']} → {last['n_timesteps']}", row
                assert printed_as(row["error at smallest n"], first["grad_params_rel_err"]), row
                assert printed_as(row["error at largest n"], last["grad_params_rel_err"]), row
                assert printed_as(row["ratio"], last["grad_params_rel_err"] / first["grad_params_rel_err"]), row
                checked += 4
            else:
                # Accuracy: min – max over n_timesteps, relative or in units of u.
                suffix = "_over_u" if "units of the unit roundoff" in heading else ""
                runs = table[setup & (table["status"] != "skipped")]
                assert row["ok"] == f"{(runs['status'] == 'ok').sum()} of {len(runs)}", row
                for header, column in RANGE_COLUMNS.items():
                    assert printed_range(row[header], runs[column + suffix]), (heading, header, row)
                    checked += 1
    return checked


def known_values(table: pd.DataFrame, parameters: pd.DataFrame) -> list[float]:
    """What a number in the report's prose may be: a results value, a dtype's constant, or a setup's error ratio."""
    numbers = [table.select_dtypes("number"), parameters.select_dtypes("number")]
    values = [float(v) for frame in numbers for v in frame.to_numpy().ravel() if pd.notna(v)]
    for spec in DTYPES:
        values += [spec.max, spec.smallest_normal, spec.smallest_subnormal, spec.unit_roundoff]
    values += [verdict.WELL_UNDER, verdict.AT_OR_ABOVE, verdict.CUTS]
    # The noise's uncertainty with four times its batches, as a standard error falls: by sqrt((B − 1)/(4B − 1)).
    for u, b in table[["grad_noise_uncertainty", "grad_noise_batches"]].dropna().drop_duplicates().to_numpy():
        values.append(u * ((b - 1) / (4 * b - 1)) ** 0.5)
    ok = table[table["status"] == "ok"].sort_values("n_timesteps")
    for _, runs in ok.groupby([*SETUP, "mode"]):
        if len(runs) > 1:
            values.append(runs["grad_params_rel_err"].iloc[-1] / runs["grad_params_rel_err"].iloc[0])
    # How much one scaling cut a dtype and library's largest parameter-gradient error against another, over the
    # runs where both ran without failure.
    for _, runs in ok.groupby(["dtype", "library", "mode"]):
        by_scaling = {
            s: r.set_index(["method", "n_timesteps"])["grad_params_rel_err"] for s, r in runs.groupby("scaling")
        }
        for a in by_scaling.values():
            for b in by_scaling.values():
                common = a.index.intersection(b.index)
                if len(common) and b[common].max() > 0:
                    values.append(a[common].max() / b[common].max())
    return values


def check_prose_numbers(text: str, table: pd.DataFrame, parameters: pd.DataFrame, manifest: dict | None = None) -> int:
    """Every decimal number of the verdict, the findings, the recommendations and what follows them, but the overview
    (which holds dates and versions), is one the data holds (the manifest's: what the timing pass took)."""
    body = text[text.index("## Verdict") : text.index("## Overview")] + text[text.index("## Accuracy") :]
    body = re.sub(r"\]\([^)]*\)", "]", body)  # link targets are file names, not numbers
    body = "\n".join(line for line in body.splitlines() if not line.startswith("|"))  # tables are checked cell by cell
    known = known_values(table, parameters) + [
        float(v) for k, v in (manifest or {}).items() if k.startswith("timing_") and isinstance(v, (int, float))
    ]
    numbers = [t for t in NUMBER.findall(body) if "." in t or "e" in t]
    percents = {t for t in re.findall(r"±(\d+(?:\.\d+)?)%", body)}  # an uncertainty, to two significant digits
    for token in numbers:
        assert any(math.isclose(float(token), v, rel_tol=PRINTED) for v in known) or (
            token in percents and any(f"{100 * v:.2g}" == token for v in known)
        ), token
    return len(numbers)


def sections(text: str) -> list[tuple[int, str, str]]:
    """(level, heading, the text up to the next heading of the same or a higher level)."""
    lines = text.splitlines()
    heads = [(i, len(line) - len(line.lstrip("#"))) for i, line in enumerate(lines) if re.match(r"^#+ ", line)]
    found = []
    for k, (i, level) in enumerate(heads):
        end = next((j for j, lv in heads[k + 1 :] if lv <= level), len(lines))
        found.append((level, lines[i], "\n".join(lines[i + 1 : end])))
    return found


# --- the report of a sweep with failures --------------------------------------------------------------------------


def test_every_failure_group_is_named_with_count_message_and_cause(overflow_sweep):
    text, table = report_text(overflow_sweep), results(overflow_sweep)
    failed = table[table.status == "failed"]
    assert len(failed) > 0, "the overflow sweep should have failures"
    headers = re.findall(r"^### \d+\. (\w+): (\d+) configurations?$", text, flags=re.M)
    counted = {}
    for failure_class, count in headers:
        counted[failure_class] = counted.get(failure_class, 0) + int(count)
    assert counted == failed.failure_class.value_counts().to_dict()
    for message in failed.failure_message:
        assert re.sub(r" at (forward|backward) step \d+$", "", message) in text, message
    group_rows = [r for heading, _, rows in tables_of(text) if re.match(r"### \d+\.", heading) for r in rows]
    assert len(group_rows) == len(failed)
    if "overflow" in counted:
        assert "exceeded the largest finite float16 number (6.55e+04)" in text
        assert "**What to do.** Scale the backward pass down" in text


def test_report_numbers_are_the_parquet_numbers(overflow_sweep, tiny_sweep):
    for folder in (overflow_sweep, tiny_sweep):
        text, table = report_text(folder), results(folder)
        parameters = pd.read_parquet(folder / "param_errors.parquet")
        timing = pd.read_parquet(folder / "timing.parquet") if (folder / "timing.parquet").is_file() else None
        assert check_numbers_against(text, table, parameters, timing) > 50
        manifest = json.loads((folder / "manifest.json").read_text())
        assert check_prose_numbers(text, table, parameters, manifest) > 0


def test_scaling_that_rescued_a_dtype_is_reported(overflow_sweep):
    text, table = report_text(overflow_sweep), results(overflow_sweep)
    unscaled_failed = table[(table.scaling == "none") & (table.status == "failed")]
    rescued = table[(table.scaling == "grad") & (table.status == "ok")].merge(
        unscaled_failed[["library", "method", "dtype", "n_timesteps"]], on=["library", "method", "dtype", "n_timesteps"]
    )
    assert not rescued.empty
    section = text[text.index("### Which scaling rescued which dtype") :].split("\n## ")[0]
    for (library, method, dtype), runs in rescued.groupby(["library", "method", "dtype"]):
        ns = ", ".join(str(n) for n in sorted(runs.n_timesteps))
        assert f"**{dtype}**, {library} {method}: without scaling it failed" in section
        assert f"`grad` worked at n = {ns}" in section
    assert "**float16 needs scaling**" in text


def test_skipped_configurations_are_counted_with_their_reason(overflow_sweep):
    text, table = report_text(overflow_sweep), results(overflow_sweep)
    skipped = table[table.status == "skipped"]
    assert f"{len(skipped)} skipped" in text
    for reason in skipped.skip_reason.unique():
        assert reason in text


# --- the answer -----------------------------------------------------------------------------------------------------

ANSWER = re.compile(
    r"^- \*\*(?P<dtype>[\w ]+)\*\*: train with (?P<library>[\w.:/-]+), (?P<scaling>no scaling|`[\w-]+` [\w ]+ "
    r"scaling), "
    r"(?P<method>\w+), n_timesteps (?P<steps>\d+(?: – \d+)?|= \d+) under `(?P<mode>[\w-]+)` \((?P<label>[a-z ]+)"
    r"(?:: the parameter-gradient roundoff is at most (?P<noise>\S+)× the gradient noise(?: at batch \d+)?"
    r"(?:; within the noise's [^)]*)?)?\)\.(?P<rest>.*)$",
    re.M,
)
DO_NOT = re.compile(
    r"^- \*\*(?P<dtype>[\w ]+)\*\*: (do not train in (?P=dtype)\. Its best setup here, .* is (?P<label>[a-z ]+): "
    r"|no answer for training: the gradient noise was not measured)",
    re.M,
)
BEYOND = re.compile(
    r"More steps buy no accuracy in [\w ]+ beyond n = (?P<n>\d+): from there the roundoff of the (?P<what>[\w ]+?) "
    r"exceeds"
)
COST = re.compile(r"Cost on \w+: (?P<seconds>\S+(?: – \S+)?) s forward \+ backward")
TIMED_COST = re.compile(
    r"Cost on \w+, timed again after the sweep \((?P<method>\w+), n_timesteps (?P<n>\d+), forward \+ backward, "
    r"(?P<repeats>\d+) interleaved repeats[^)]*\): (?P<dtype>\w+) with (?P<library>\S+) takes (?P<median>[\d.]+)× "
    r"float32's time \((?P<range>[^)]+)\)"
)
LABELS = (verdict.SAFE, verdict.TRAINING, verdict.BORDERLINE, verdict.UNSAFE)


# The libraries a model's own torchdiffeq calls are: the user's own (every other one is a switch).
USERS_OWN = ("torchdiffeq", "torchdiffeq-adjoint")


def changes(scaling: str, library: str) -> tuple[bool, bool]:
    """What a setup of one dtype label (its kept modules are in the label) changes: scaling, then another library."""
    return scaling != "none", library not in USERS_OWN


def check_timed_cost(timed: re.Match, timing: pd.DataFrame, runs: pd.DataFrame) -> None:
    """The answer's timed cost against the timing table: its setup's forward + backward over float32's with the same
    library, round by round, at the n_timesteps it names."""
    n = int(timed["n"])
    assert n in set(runs.n_timesteps) and timed["method"] == runs.method.iloc[0]
    same = {c: runs[c].iloc[0] for c in ("library", "method", "mode", "keep_float32", "loss_in")}
    at = timing[(timing[list(same)] == pd.Series(same)).all(axis=1) & (timing.n_timesteps == n)]
    timed_s = at.assign(s=at.time_forward_s + at.time_backward_s)
    seconds = timed_s.pivot_table(index="repeat", columns="dtype", values="s")
    ratios = seconds[timed["dtype"]] / seconds["float32"]
    assert len(ratios) == int(timed["repeats"])
    assert printed_to_decimals(timed["median"], ratios.median())
    low, _, high = timed["range"].partition("–")
    assert printed_to_decimals(low, ratios.min()) and printed_to_decimals(high or low, ratios.max())


def check_answers(text: str, table: pd.DataFrame, timing: pd.DataFrame | None = None) -> int:
    """Each dtype's answer against the Parquet and the verdict table (and the timing table, where the folder has
    one); returns how many dtypes were checked."""
    level, heading, section = sections(text)[1]
    assert heading == "## The answer", "the answer is the report's first section"
    setups = [row for h, _, rows in tables_of(text) if h == "## Verdict" for row in rows]
    claims = list(ANSWER.finditer(section))
    refusals = list(DO_NOT.finditer(section))
    assert sorted(c["dtype"] for c in claims + refusals) == sorted(
        table.loc[table.status != "skipped", "dtype"].unique()
    )
    for c in claims:
        scaling = "none" if c["scaling"] == "no scaling" else c["scaling"].split("`")[1]
        setup = table[
            (table.dtype == c["dtype"])
            & (table.library == c["library"])
            & (table.scaling == scaling)
            & (table["mode"] == c["mode"])
        ]
        assert (setup.status == "ok").all() and c["label"] in (verdict.SAFE, verdict.TRAINING), c[0]
        # The simplest setup safe for training (docs/verdict.md): no setup of the dtype safe for training asks fewer
        # changes; of those asking as many, none has a better label, nor the same label with a smaller error.
        rows = [r for r in setups if r["dtype"] == c["dtype"] and r["setup"] in (verdict.SAFE, verdict.TRAINING)]
        for r in rows:
            assert changes(r["scaling"], r["library"]) >= changes(scaling, c["library"]), (r, c[0])
            if changes(r["scaling"], r["library"]) > changes(scaling, c["library"]):
                continue
            assert LABELS.index(r["setup"]) >= LABELS.index(c["label"]), (r, c[0])
            if r["setup"] == c["label"]:
                assert float(r["param. gradient roundoff (max)"]) >= setup.grad_params_rel_err.max() * (1 - PRINTED), (
                    r,
                    c[0],
                )
        # The method whose largest total error (discretisation and roundoff) is smallest in that setup.
        assert setup.groupby("method").total_grad_params_rel_err.max().idxmin() == c["method"]
        runs = setup[setup.method == c["method"]]
        low, _, high = c["steps"].removeprefix("= ").partition(" – ")
        assert (int(low), int(high or low)) == (runs.n_timesteps.min(), runs.n_timesteps.max())
        assert printed_as(c["noise"], setup.roundoff_to_noise.max()), c[0]
        beyond = BEYOND.search(c["rest"])
        if beyond:
            column = "sol_roundoff_to_disc" if beyond["what"].startswith("solution") else "grad_params_roundoff_to_disc"
            ratios = runs.set_index("n_timesteps")[column]
            n = int(beyond["n"])
            assert ratios[n] >= 1 and (ratios[ratios.index < n] < 1).all(), (c[0], ratios)
        else:
            assert not (
                (runs.sol_roundoff_to_disc >= 1) & (runs.disc_sol_rel_err >= 3 * runs.fine_ref_final_rel_err)
            ).any(), c[0]
        cost, timed = COST.search(c["rest"]), TIMED_COST.search(c["rest"])
        if timed is not None:
            assert timing is not None, c[0]
            check_timed_cost(timed, timing, runs)
        else:
            assert cost and printed_range(cost["seconds"], runs.time_forward_s + runs.time_backward_s), c[0]
        code = section[c.end() : section.find("```", section.find("```python", c.end()) + 3)]
        assert ("from roundoff_analyzer.solvers import odeint" in code) == c["library"].startswith("native"), code
        assert ("torch.amp.GradScaler" in code) == (scaling == "grad") and ("DynamicAdjointScaler()" in code) == (
            scaling == "dynamic"
        )
        assert f"dtype=torch.{c['dtype']})" in code and f'method="{code_method(c["library"], c["method"])}"' in code
    for r in refusals:
        assert all(row["setup"] not in (verdict.SAFE, verdict.TRAINING) for row in setups if row["dtype"] == r["dtype"])
    return len(claims) + len(refusals)


def test_the_answer_comes_first_and_follows_from_the_parquet(overflow_sweep, tiny_sweep):
    for folder in (overflow_sweep, tiny_sweep):
        timing = pd.read_parquet(folder / "timing.parquet") if (folder / "timing.parquet").is_file() else None
        assert check_answers(report_text(folder), results(folder), timing) >= 1
    # The overflow sweep's float16 fails without scaling: the answer names the scaling that made it safe, and its code.
    text = report_text(overflow_sweep)
    assert re.search(r"^- \*\*float16\*\*: train with [\w-]+, `(grad|dynamic)` ", text, re.M), text[:2000]


# A failure's own line: "failed LIBRARY METHOD n=N …" (a wrapped verdict line may also begin with "failed").
FAILURE_LINE = re.compile(r"^failed \S+ \S+ n=\d+ ", re.M)


def test_show_and_sweep_end_with_the_answer_and_a_filter_says_what_it_filters(overflow_sweep):
    unfiltered = run_cli("show", overflow_sweep)
    filtered = run_cli("show", overflow_sweep, "--where", "status != 'ok'")
    assert unfiltered.exit_code == filtered.exit_code == 0, filtered.output

    def judgement(output: str) -> str:
        """The verdict and answer lines, unwrapped (they run from the first verdict to the failure messages)."""
        lines = output.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
        end = next((i for i, line in enumerate(lines) if i > start and FAILURE_LINE.match(line)), len(lines))
        return " ".join(" ".join(lines[start:end]).split())

    judged = judgement(unfiltered.stdout)
    assert "answer: float16: train with" in judged
    table = results(overflow_sweep)
    scope = (
        f"judge the whole sweep ({len(table)} configurations), not only the {(table.status != 'ok').sum()} that "
        "--where shows"
    )
    assert scope in " ".join(filtered.stdout.split()) and "the whole sweep" not in unfiltered.stdout
    # Under the filter the verdict and the answer are the whole sweep's, word for word.
    assert judgement(filtered.stdout) == judged


# --- the report of a sweep without failures -----------------------------------------------------------------------


def test_report_without_failures_says_so_and_has_no_empty_section(tiny_sweep):
    table = results(tiny_sweep)
    assert set(table.status) <= {"ok", "skipped"}, table[table.status == "failed"][["failure_class", "failure_message"]]
    text = report_text(tiny_sweep)
    assert "No configuration failed" in text
    for absent in (
        "Which scaling rescued",
        "Failed at every",
        "Worked at some",
        "needs scaling** where it failed",
        "Cause.",
    ):
        assert absent not in text
    for _level, heading, body in sections(text):
        assert body.strip(), f"empty section {heading!r}"
    assert "**Data**: **synthetic**" in text
    assert (
        "28 = 2 n_timesteps (4, 16) × 2 methods (euler, rk4) × 1 mode (autocast) × 7 (library, dtype, scaling)" in text
    )


# --- figures ------------------------------------------------------------------------------------------------------


def panel_lines(ax) -> dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


@pytest.mark.parametrize("metric", ["sol_rel_err", "grad_params_rel_err"])
def test_error_figure_has_one_line_per_library_and_scaling_and_the_u_line(tiny_sweep, metric):
    table = results(tiny_sweep)
    figure = error_figure(table, metric)
    assert len(figure.axes) == table.method.nunique() * table.dtype.nunique()
    for ax in figure.axes:
        method, dtype = ax.get_title().split(", ")
        panel = table[(table.method == method) & (table.dtype == dtype) & (table.status != "skipped")]
        lines = panel_lines(ax)
        expected = {
            f"{lib} {scaling}"
            for lib, scaling in panel[["library", "scaling"]].drop_duplicates().itertuples(index=False)
        }
        u_labels = [label for label in lines if label.startswith("u (")]
        assert set(lines) - set(u_labels) == expected
        assert len(u_labels) == 1 and list(lines[u_labels[0]].get_ydata()) == [panel.unit_roundoff.iloc[0]] * 2
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_failed_runs_are_marked_not_dropped(overflow_sweep):
    table = results(overflow_sweep)
    figure = error_figure(table, "grad_params_rel_err")
    marked = 0
    for ax in figure.axes:
        marks = [line for line in ax.get_lines() if line.get_label() == "_failed"]
        marked += sum(len(line.get_xdata()) for line in marks)
    assert marked == (table.status == "failed").sum() > 0
    (legend,) = figure.legends  # one legend for the whole figure
    assert FAILED_LABEL in [t.get_text() for t in legend.get_texts()]


def test_adjoint_figure_shows_the_dtype_range_where_the_data_reaches_it(overflow_sweep):
    profile = read_sweep_folder(overflow_sweep).profile
    figure = adjoint_range_figure(profile)
    for ax in figure.axes:
        dtype = ax.get_title().split(", ")[1].split()[0]
        lines = panel_lines(ax)
        low, high = ax.get_ylim()
        for name, level in (("max", DTYPES.get(dtype).max), ("smallest normal", DTYPES.get(dtype).smallest_normal)):
            label = f"{dtype} {name} = {level:.3g}"
            if label in lines:
                assert list(lines[label].get_ydata()) == [level] * 2 and low <= level <= high
            else:  # far from every value drawn: the title says so, and the axis is not stretched to it
                assert (
                    f"{name} {level:.3g}" in ax.get_title()
                    and "off the scale" in ax.get_title()
                    and not low <= level <= high
                )


def test_many_coinciding_lines_leave_the_layout_alone(tiny_sweep, tmp_path):
    """Every line of a panel on top of another (as a small user model gives): the note naming them used to squeeze the
    panels to nothing, and matplotlib warned that constrained layout was not applied."""
    import warnings

    from roundoff_analyzer.report.figures import save

    table = results(tiny_sweep)
    for metric in RANGE_COLUMNS.values():
        table[metric] = table.groupby(["method", "dtype", "n_timesteps"])[metric].transform("first")
    renamed = table.assign(library=table.library + "-with-a-rather-long-name")
    figure = error_figure(pd.concat([table, renamed]), "sol_rel_err")
    notes = [t.get_text() for ax in figure.axes for t in ax.texts if t.get_text().startswith("coincide")]
    assert notes and all(text.count("\n") >= 2 for text in notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # A dependency's notice of its own deprecations (matplotlib 3.8 with pyparsing 3.3) is not the layout's warning.
        warnings.simplefilter("ignore", DeprecationWarning)
        save(figure, tmp_path, "coinciding")


PASSIVE_CHANNEL = str(Path(__file__).parent / "fixtures" / "passive_channel.py") + ":passive_channel"


@pytest.fixture(scope="module")
def recovered_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("recovered") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        PASSIVE_CHANNEL,
        "--timesteps",
        "4,8",
        "--method",
        "euler",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--library",
        "native,torchdiffeq",
        "--noise-batches",
        "0",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out


def test_an_ok_run_with_overflowed_casts_is_drawn_recovered_not_failed_and_named(recovered_sweep):
    """A float16 run ends ok although the adjoint it records, cast to float16, overflows at its backward steps (a
    passive float32 channel whose large adjoint no low-precision product sees): the figure marks those steps as
    recovered, never as failed, and the report lists them."""
    tiny_sweep = recovered_sweep
    folder = read_sweep_folder(tiny_sweep)
    table, profile = folder.results, folder.profile
    assert (table.status != "failed").all()
    backward = profile[profile.phase == "backward"]
    overflowed = backward[~backward.max_abs_low.map(math.isfinite)]
    expected = {tuple(key): tuple(sorted(rows.step)) for key, rows in overflowed.groupby(SETUP + ["n_timesteps"])}
    assert expected, "the passive channel's adjoint should overflow its float16 casts"
    found = recovered_overflows(profile, table)
    assert {(*r.setup[:4], r.n_timesteps): r.steps for r in found} == expected
    n = int(profile.n_timesteps.max())
    figure = adjoint_range_figure(profile, n, table)
    marks = [line for ax in figure.axes for line in ax.get_lines()]
    drawn = sum(len(line.get_xdata()) for line in marks if line.get_label() == "_recovered")
    assert drawn == sum(len(steps) for key, steps in expected.items() if key[-1] == n) > 0
    assert not [line for line in marks if line.get_label() == "_failed"]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert RECOVERED_LABEL in legend and FAILED_LABEL not in legend
    # Without the statuses nothing says the runs recovered: then they are marked as before, as failed.
    assert any(line.get_label() == "_failed" for ax in adjoint_range_figure(profile, n).axes for line in ax.get_lines())
    text = report_text(tiny_sweep)
    assert "**Overflows the runs recovered from.**" in text and "They still count as `ok`" in text
    for r in found:
        assert f"{' '.join(r.setup[:4])} at n = {r.n_timesteps}: backward steps {r.steps[0]}–" in text


@pytest.mark.slow  # every figure rendered and opened: 10 s
def test_figures_open_as_images_and_are_linked_relatively(overflow_sweep, tmp_path):
    out = tmp_path / "elsewhere" / "report.md"
    result = run_cli("report", overflow_sweep, "--out", out)
    assert result.exit_code == 0, result.output
    links = re.findall(r"\]\(([^)]+\.(?:png|svg))\)", out.read_text())
    assert len(links) == 2 * len(draw_figures(read_sweep_folder(overflow_sweep)))
    for link in links:
        assert not Path(link).is_absolute()
        target = (out.parent / link).resolve()
        if target.suffix == ".png":
            image = imread(target)
            assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200
        else:
            assert "<svg" in target.read_text()[:1000]


# --- pieces -------------------------------------------------------------------------------------------------------


def test_a_pipe_in_a_message_cannot_break_a_table(overflow_sweep):
    table = results(overflow_sweep)
    row = table[table.status == "failed"].head(1).assign(failure_message="expected a | b, got c", failure_class="error")
    other = row.assign(failure_message="expected x | y, got z", n_timesteps=row.n_timesteps + 1)
    group = FailureGroup("error", "RuntimeError", "expected … | …", pd.concat([row, other]))
    parsed = tables_of(failure_group_table(group, pd.concat([table, other]), with_mode=False))
    (_, headers, rows) = parsed[0]
    assert [r["message"] for r in rows] == ["expected a | b, got c", "expected x | y, got z"]
    assert all(len(r) == len(headers) for r in rows)
    assert split_row(markdown_table([["a|b", "c"]], ["x", "y"]).splitlines()[2]) == ["a|b", "c"]


def test_each_failure_class_is_explained_in_its_own_words(overflow_sweep):
    row = results(overflow_sweep).query("status == 'failed'").head(1)
    explanations = {
        failure_class: explain(FailureGroup(failure_class, "X", "m", row.assign(failure_class=failure_class)), {})
        for failure_class in FAILURE_CLASSES
    }
    assert len({e.cause for e in explanations.values()}) == len(FAILURE_CLASSES)
    assert len({e.remedy for e in explanations.values()}) == len(FAILURE_CLASSES)


def test_overflow_step_progression_follows_n_timesteps(overflow_sweep):
    table = results(overflow_sweep)
    native = (table.library == "native") & (table.scaling == "none")
    steps = {4: 0, 16: 1}
    progressed = table[native].assign(
        status="failed",
        failure_class="overflow",
        overflow_phase="backward",
        overflow_step=table[native].n_timesteps.map(steps),
    )
    (found,) = overflow_progressions(progressed)
    assert found.steps == ((4, 0), (16, 1)) and found.phase == "backward"


def test_growth_is_claimed_only_when_the_numbers_show_it(tiny_sweep):
    table = results(tiny_sweep)
    torchdiffeq_rk4 = (table.library == "torchdiffeq") & (table.method == "rk4")
    grows = torchdiffeq_rk4 & (table.dtype == "float16")
    largest = grows & (table.n_timesteps == table.n_timesteps.max())
    steep = table.copy()
    steep.loc[largest, "grad_params_rel_err"] = 10 * table.loc[grows, "grad_params_rel_err"].min()
    claim = "**Error growth with n_timesteps** (rk4, float16, scaling "
    assert any(
        item.startswith(f"- {claim}")
        and "torchdiffeq's parameter-gradient error grows" in item
        and "while native's stays within" in item
        for item in recommendations(steep, False)
    )
    flat = table.copy()
    for dtype in table.dtype.unique():
        same = torchdiffeq_rk4 & (table.dtype == dtype)
        flat.loc[same, "grad_params_rel_err"] = table.loc[same, "grad_params_rel_err"].min()
    assert not any("Error growth" in item for item in recommendations(flat, False))


# --- the command line ---------------------------------------------------------------------------------------------


def test_sweep_writes_the_report_unless_told_not_to(tiny_sweep, tmp_path):
    assert (tiny_sweep / "report.md").is_file() and (tiny_sweep / "figures" / "error_grad_params.png").is_file()
    out = tmp_path / "quiet"
    grid = ["--model", "linear", "--timesteps", "2", "--method", "euler", "--library", "native", "--dtype", "float16"]
    result = run_cli("sweep", *grid, "--scaling", "none", "--no-report", "--out", out)
    assert result.exit_code == 0, result.output
    assert (out / "results.parquet").is_file() and not (out / "report.md").exists() and not (out / "figures").exists()


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_report_of_bad_input_is_one_line_and_writes_nothing(tmp_path):
    assert "not a folder" in one_error_line(run_cli("report", tmp_path / "missing"))
    (tmp_path / "manifest.json").write_text("{}")
    assert "results.parquet" in one_error_line(run_cli("report", tmp_path))
    (tmp_path / "results.parquet").write_bytes(b"not parquet")
    assert "cannot read" in one_error_line(run_cli("report", tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "results.parquet"]


def test_show_filters_and_colours_failures(overflow_sweep):
    table = results(overflow_sweep)
    result = run_cli("show", overflow_sweep, "--where", "status == 'failed'")
    assert result.exit_code == 0, result.output
    # (the table's title wraps at the table's width, which its few rows may make narrow)
    assert f"{(table.status == 'failed').sum()} of {len(table)} configurations" in " ".join(result.stdout.split())
    assert len(FAILURE_LINE.findall(result.stdout)) == (table.status == "failed").sum()
    assert "--where 'dtyp ==' is not a filter (invalid syntax)" in one_error_line(
        run_cli("show", overflow_sweep, "--where", "dtyp ==")
    )


# --- reports of sweeps with nothing, everything or one thing failing ---------------------------------------------


def _tiny_sweep(out: Path, *args: str):
    return run_cli(
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
        *args,
        "--out",
        out,
    )


@pytest.mark.slow  # three sweeps and their reports: about 20 s
def test_all_failed_all_skipped_and_single_configuration_sweeps_each_give_a_report(tmp_path):
    overflowing = [
        "-o",
        "alpha=1,2e7,8e6",
        "--dtype",
        "float16",
        "--scaling",
        "none",
        "--method",
        "rk4",
        "--timesteps",
        "4,8",
    ]
    cases = {
        "all_failed": overflowing,
        "all_skipped": [
            "--library",
            "torchdiffeq",
            "--scaling",
            "dynamic",
            "--dtype",
            "float16",
            "--method",
            "euler",
            "--timesteps",
            "4",
        ],
        "single": [
            "--library",
            "native",
            "--scaling",
            "none",
            "--dtype",
            "bfloat16",
            "--method",
            "euler",
            "--timesteps",
            "4",
        ],
    }
    for name, args in cases.items():
        out = tmp_path / name
        result = _tiny_sweep(out, *args)
        assert result.exit_code == 0, (name, result.output)
        table = results(out)
        text = report_text(out)
        assert text.startswith("# Roundoff report") and "## Verdict" in text, name
        if name == "all_failed":
            assert (table.status == "failed").all()
            assert "**unsafe**" in text
            assert (
                "- **float16**: do not train in float16. Its best setup here, " in text
                and check_answers(text, table) == 1
            )
            # Every n_timesteps where a run failed has its own adjoint figure, and the report links it.
            for n in sorted(table.n_timesteps.unique()):
                assert (out / "figures" / f"adjoint_range_n{n}.svg").is_file()
                assert f"figures/adjoint_range_n{n}.png" in text
        if name == "all_skipped":
            assert (table.status == "skipped").all() and "nothing to judge" in text
        if name == "single":
            assert len(table) == 1 and table.status.iloc[0] == "ok"


def test_the_answer_costs_time_and_memory_against_float32(tmp_path):
    out = tmp_path / "against-float32"
    args = [
        "--library",
        "native",
        "--dtype",
        "float16,float32",
        "--scaling",
        "none",
        "--method",
        "euler",
        "--timesteps",
        "4",
        "--cpu-memory",
        "--no-timing",  # the words of each run's single timing (tests/test_timing_pass.py: the pass's)
    ]
    result = _tiny_sweep(out, *args)
    assert result.exit_code == 0, result.output
    assert not (out / "timing.parquet").exists()
    table = results(out).set_index("dtype")
    text = report_text(out)
    time_ratio = table.eval("time_forward_s + time_backward_s")
    memory_ratio = table.peak_memory_bytes["float16"] / table.peak_memory_bytes["float32"]
    cost = re.search(r"\*\*float16\*\*: .* Cost on cpu: (\S+)× float32's time, (\S+)× its peak memory; on a CPU", text)
    assert cost, text[:3000]
    # Ratios are printed with two decimals.
    assert math.isclose(float(cost[1]), time_ratio["float16"] / time_ratio["float32"], abs_tol=0.005)
    assert math.isclose(float(cost[2]), memory_ratio, abs_tol=0.005)
    assert "answer: float16: train with native" in " ".join(result.stdout.split())  # the sweep ends with it too


def test_the_native_answer_costs_what_it_replaces_torchdiffeq_float32_from_the_table(tmp_path):
    from roundoff_analyzer.judging import answer

    out = tmp_path / "switch"
    args = ["--library", "native,torchdiffeq", "--dtype", "float16,float32", "--scaling", "none"]
    result = _tiny_sweep(out, *args, "--method", "euler", "--timesteps", "4", "--cpu-memory", "--no-timing")
    assert result.exit_code == 0, result.output
    table = results(out)
    row = table.set_index(["library", "dtype"])
    seconds = row.eval("time_forward_s + time_backward_s")
    native = table[(table.library == "native") & (table.dtype == "float16")]
    cost = answer.cost(table, native)
    time_ratio = seconds["native", "float16"] / seconds["torchdiffeq", "float32"]
    memory_ratio = row.peak_memory_bytes["native", "float16"] / row.peak_memory_bytes["torchdiffeq", "float32"]
    assert cost is not None and cost.switch_time_ratio == pytest.approx((time_ratio, time_ratio))
    assert cost.switch_memory_ratio == pytest.approx((memory_ratio, memory_ratio))
    # torchdiffeq's own runs, and native's float32, switch from nothing.
    torchdiffeq = answer.cost(table, table[(table.library == "torchdiffeq") & (table.dtype == "float16")])
    native_float32 = answer.cost(table, table[(table.library == "native") & (table.dtype == "float32")])
    assert torchdiffeq is not None and torchdiffeq.switch_time_ratio is None
    assert native_float32 is not None and native_float32.switch_time_ratio is None
    text = " ".join(report_text(out).split())
    said = re.search(r"\*\*float16\*\*: train with (\S+),.*?Cost on cpu: .*?; on a CPU", text)
    assert said, text[:3000]
    replaced = r"against torchdiffeq in float32 \(what this replaces\), (\S+)× its time, (\S+)× its peak memory"
    switch = re.search(replaced, said[0])
    assert (switch is not None) == (said[1] == "native")
    if switch:
        assert math.isclose(float(switch[1]), time_ratio, abs_tol=0.005)
        assert math.isclose(float(switch[2]), memory_ratio, abs_tol=0.005)


@pytest.mark.slow  # every figure rendered twice: 10 s
def test_regenerated_figures_are_byte_identical(tiny_sweep, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_sweep, copy)
    assert run_cli("report", copy).exit_code == 0
    first = {p.name: p.read_bytes() for p in (copy / "figures").glob("*.svg")}
    assert run_cli("report", copy).exit_code == 0
    second = {p.name: p.read_bytes() for p in (copy / "figures").glob("*.svg")}
    assert first and first == second


def test_weight_cache_advice_follows_the_numbers(tiny_sweep):
    from roundoff_analyzer.report.sections.recommendations import weight_cache

    table = results(tiny_sweep)
    torchdiffeq = table[(table.library == "torchdiffeq") & (table.status == "ok")]
    largest = torchdiffeq.n_timesteps == torchdiffeq.n_timesteps.max()
    steep = torchdiffeq.copy()
    steep.loc[largest, "grad_params_rel_err"] = 10 * steep.loc[largest, "grad_params_rel_err"]
    uncached = torchdiffeq.assign(mode="autocast-nocache")
    advice = weight_cache(pd.concat([steep, uncached]))
    assert advice and all("pass `cache_enabled=False`" in item for item in advice)
    # Where the cache-free runs grow as much, the cache is not to blame.
    assert not weight_cache(pd.concat([steep, steep.assign(mode="autocast-nocache")]))


def _copied_without_figures(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    shutil.rmtree(to / FIGURES, ignore_errors=True)
    return to


def _figure_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((folder / FIGURES).iterdir())}


@pytest.mark.slow  # the report's figures saved twice, and a helper process forked
def test_figures_saved_beside_a_helper_process_are_the_same_files_in_this_processs_style(overflow_sweep, tmp_path):
    alone = _copied_without_figures(overflow_sweep, tmp_path / "alone")
    helped = _copied_without_figures(overflow_sweep, tmp_path / "helped")
    with matplotlib.rc_context({"lines.linewidth": 2.5, "font.size": 11.0}):  # a style of the user's own
        saved_alone = save_figures(read_sweep_folder(alone), helper=False)
        saved_helped = save_figures(read_sweep_folder(helped), helper=True)
    assert [p.name for p in saved_alone] == [p.name for p in saved_helped] and len(saved_alone) >= 2
    assert _figure_files(alone) == _figure_files(helped)
    default_style = _copied_without_figures(overflow_sweep, tmp_path / "default")
    save_figures(read_sweep_folder(default_style), helper=False)
    assert _figure_files(default_style).keys() == _figure_files(alone).keys()
    assert _figure_files(default_style) != _figure_files(alone)  # the style reached every file, the helper's too


def test_a_helper_that_fails_leaves_its_figures_to_this_process(overflow_sweep, tmp_path):
    folder = _copied_without_figures(overflow_sweep, tmp_path / "sweep")
    sweep = read_sweep_folder(folder)
    (folder / "results.parquet").unlink()  # the helper reads the tables from the folder: it cannot
    saved = save_figures(sweep, helper=True)
    assert [p.stem for p in saved] == list(draw_figures(sweep)) and all(p.is_file() for p in saved)
