"""Issue 65's case at n_timesteps 8: the OT-Flow whose float16 gradients overflow without scaling, swept keeping
nothing or its first layer in float32, without and with `grad`. The answer trains with the fewest changes that are
safe and says what the kept layer would buy; the terminal summary (`roundoff sweep`'s end, `roundoff show`) says where
the overflow began and which draws were replayed, as the report does."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from roundoff_analyzer.judging.answer import answers
from roundoff_analyzer.judging.choice import choose
from roundoff_analyzer.report import formatting

from .conftest import run_cli
from .test_same_draws import sweep as drawing_sweep

KEPT = "potential.layers.0"


def words(text: str) -> str:
    """`text` with its whitespace made single spaces: a terminal of any width wraps it anywhere."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def kept_or_not(tmp_path_factory) -> tuple[Path, str]:
    """The sweep folder and what `roundoff sweep` printed."""
    out = tmp_path_factory.mktemp("simplest") / "sweep"
    result = run_cli(
        "sweep",
        "--model",
        "otflow",
        "-o",
        "alpha=1,2e5,8e4",  # the model (OT-Flow's own sizes): its loss weights overflow float16
        "--method",
        "euler",
        "--dtype",
        "float16",
        "--scaling",
        "none,grad",
        "--library",
        "native",
        "--keep-float32",
        f"none,{KEPT}",
        "--timesteps",
        "8",
        "--per-module",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
def test_the_answer_keeps_no_layer_when_scaling_alone_is_safe_and_says_what_the_layer_would_buy(kept_or_not):
    out, printed = kept_or_not
    results = pd.read_parquet(out / "results.parquet")
    chosen = choose(results)
    assert chosen is not None
    # The case: float16 overflows unscaled; `grad` alone is safe for training, and so is `grad` keeping the layer.
    found = {a.dtype: a for a in answers(results)}
    kept = found[f"float16 keeping {KEPT} in float32"]
    assert found["float16"].train and kept.train
    assert chosen.answer.dtype == "float16" and chosen.answer.scaling == "grad" and chosen.answer.kept is None
    mine, theirs = chosen.answer.judgement.to_noise, kept.judgement.to_noise
    assert mine is not None and theirs is not None
    report = words((out / "report.md").read_text())
    buys = f"keeping `{KEPT}` in float32 lowers it to {formatting.in_u(theirs.value)}×; not needed"
    u = chosen.answer.judgement.noise_uncertainty or 0.0
    if theirs.value * (1 + u) < mine.value:  # the numbers: the layer lowers the ratio; the answer says how much
        assert chosen.lower is not None and chosen.lower.kept == KEPT
        assert buys in report and buys.replace("`", "") in words(printed)
    else:  # it buys nothing the noise can tell here: nothing to say
        assert chosen.lower is None and "not needed" not in report
    assert "**Train with float16**: native, `grad` loss scaling" in report


@pytest.mark.slow
def test_the_terminal_summary_names_where_the_overflow_began_as_the_report_does(kept_or_not):
    out, printed = kept_or_not
    report = (out / "report.md").read_text()
    begun = re.search(r"^\*\*float16\*\*, (.*?)\. (The overflow began in .*)$", report, flags=re.M)
    assert begun is not None, report  # the unscaled runs overflow: the section names the module
    said = words(f"overflow: float16, {begun[1]}: {begun[2]}".replace("`", ""))
    shown = run_cli("show", out)
    assert shown.exit_code == 0, shown.output
    assert said in words(printed) and said in words(shown.output)
    assert "draws:" not in shown.output  # OT-Flow's loss draws nothing


@pytest.mark.slow
def test_the_terminal_summary_names_the_draws_replayed_as_the_report_does(tmp_path):
    out = tmp_path / "drawn"
    drawing_sweep("held_out", out, {"batch": 16}, report=True)  # the step draws; every run is given its draws
    report = (out / "report.md").read_text()
    drawn = re.search(r"^- \*\*Random draws\*\*: (.*)$", report, flags=re.M)
    assert drawn is not None, report
    shown = run_cli("show", out)
    assert shown.exit_code == 0, shown.output
    assert words(f"draws: {drawn[1]}".replace("`", "")) in words(shown.output)
    assert "torch's randn_like ×1: 32 numbers" in words(shown.output)
    assert "overflow:" not in shown.output  # no --per-module: nothing says where
