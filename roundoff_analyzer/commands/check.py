"""`roundoff check`: compare a sweep with a baseline; exit 1 on a regression, for CI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..core.errors import InputError
from ..core.text import printable
from .terminal import reports_input_errors, wide_console

if TYPE_CHECKING:  # pandas and torch: imported when the command runs
    from ..judging.check import Comparison

EXIT_REGRESSION = 1
VERDICT_STYLE = {
    "regression": "red",
    "reference moved": "magenta",
    "improvement": "green",
    "new": "cyan",
    "missing": "yellow",
}


@dataclass(frozen=True)
class CheckRequest:
    """`roundoff check`'s arguments and options as given, one field each."""

    results: Path
    baseline: Path
    factor: list[str]
    floor_u: list[str]
    markdown: Path | None
    junit: Path | None
    update_baseline: bool
    allow_different_setup: bool


@reports_input_errors
def check_command(request: CheckRequest) -> None:
    """Compare the request's sweep with its baseline and print what changed; exit 1 on a regression."""
    # Here, not at the top: `roundoff --help` and the other commands start without pandas and torch.
    from ..judging.baseline import ensure_writable, replace_with
    from ..judging.check import compare, parse_tolerances, share_nothing
    from ..judging.check_output import REPORTED, headline, junit_xml, markdown_summary, only_on_one_side
    from ..judging.environments import environment_differences
    from ..storage.results import load_results

    tolerances = parse_tolerances(request.factor, request.floor_u)
    new_results, baseline_results = load_results(request.results), load_results(request.baseline)
    setup_note = _compare_setups(request.results, request.baseline, request.allow_different_setup)
    if request.update_baseline:
        ensure_writable(request.baseline)
    comparison = compare(
        new_results, baseline_results, tolerances, names=(f"'{request.results}'", f"baseline '{request.baseline}'")
    )
    disjoint = share_nothing(new_results, baseline_results)
    if disjoint:
        raise InputError(
            f"{disjoint}: compare with a baseline of the same grid, or replace '{request.baseline}' with these results"
        )

    console = wide_console(piped_width=160)  # the changes table: whole configuration names and reasons on one line
    for line in ([setup_note] if setup_note else []) + only_on_one_side(comparison) + comparison.yardsticks:
        console.print(printable(line), highlight=False, markup=False, soft_wrap=True)
    if any(not comparison.with_verdict(verdict).empty for verdict, _ in REPORTED):
        console.print(changes_table(comparison))
        differs = environment_differences(baseline_results, new_results)
        if differs:  # a change measured elsewhere may be the machine's, not the code's
            console.print(
                f"the environment differs from the baseline's: {printable('; '.join(differs))}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    style = "red" if comparison.regressed else "green"
    console.print(
        f"[bold {style}]{headline(comparison)}[/]. {comparison.summary()}. Tolerance: "
        f"{comparison.tolerances.describe()}.",
        highlight=False,
    )
    if request.markdown:
        _write(request.markdown, lambda path: path.write_text(markdown_summary(comparison)))
        console.print(f"markdown summary: {printable(request.markdown)}", highlight=False, markup=False)
    if request.junit:
        _write(request.junit, lambda path: junit_xml(comparison).write(path, encoding="utf-8", xml_declaration=True))
        console.print(f"JUnit XML: {printable(request.junit)}", highlight=False, markup=False)
    if request.update_baseline:
        if comparison.regressed:
            console.print(
                "baseline not updated: a baseline is not updated over a regression or a moved reference",
                highlight=False,
            )
        else:
            written = replace_with(request.baseline, request.results)
            wrote = ", ".join(printable(p) for p in written)
            console.print(f"baseline updated: wrote {wrote}", highlight=False, markup=False)
    if comparison.regressed:
        raise SystemExit(EXIT_REGRESSION)


def _compare_setups(results: Path, baseline: Path, allow_different: bool) -> str | None:
    """Refuse two sweeps of different setups (unless allowed); returns a line to show, or None."""
    from ..judging.manifest_setup import changed_code, differences, read_setup

    new_setup, baseline_setup = read_setup(results), read_setup(baseline)
    if new_setup is None or baseline_setup is None:
        lacking = results if new_setup is None else baseline
        return f"setups not compared: '{lacking}' has no manifest.json beside its results"
    differs = differences(new_setup, baseline_setup)
    code = changed_code(results, baseline)
    if not differs:
        return code
    if not allow_different:
        raise InputError(
            f"'{results}' and baseline '{baseline}' were run on different setups ({'; '.join(differs)}); "
            "compare sweeps of one setup, or give --allow-different-setup"
        )
    return f"setups differ (compared anyway, --allow-different-setup): {'; '.join(differs + ([code] if code else []))}"


def changes_table(comparison: Comparison) -> Table:
    from ..judging.check_output import REPORTED, configuration_name

    table = Table(title="roundoff check: what changed against the baseline", header_style="bold")
    for column in ("verdict", "configuration", "baseline", "now", "what changed"):
        table.add_column(column)
    for verdict, _ in REPORTED:
        for _, row in comparison.with_verdict(verdict).iterrows():
            table.add_row(
                f"[{VERDICT_STYLE[verdict]}]{verdict}[/]",
                escape(printable(configuration_name(row))),
                escape(printable(row["status_baseline"])),
                escape(printable(row["status_new"])),
                escape(printable(row["reasons"])),
            )
    return table


def _write(path: Path, write: Callable[[Path], object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        raise InputError(f"cannot write '{path}': {exc.strerror or exc}") from None
