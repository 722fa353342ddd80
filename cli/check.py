"""`roundoff check`'s arguments and options; what it does is `roundoff_analyzer.commands.check`."""

from __future__ import annotations

from pathlib import Path

import typer

from roundoff_analyzer.commands import DEFAULT_FACTOR, DEFAULT_FLOOR_U, CheckRequest, check_command


def check(
    results: Path = typer.Argument(
        ...,
        help="New results: a sweep folder or its results.parquet.",
    ),
    baseline: Path = typer.Option(
        ...,
        "--baseline",
        "-b",
        help="Baseline results: a sweep folder or a results Parquet file.",
    ),
    factor: list[str] = typer.Option(
        [],
        "--factor",
        "--tolerance",
        metavar="[METRIC=]FACTOR",
        help=(
            "Allowed growth of an error: FACTOR x baseline (+ the floor). FACTOR for every metric, or METRIC=FACTOR "
            f"(repeatable). Default {DEFAULT_FACTOR:g}."
        ),
    ),
    floor_u: list[str] = typer.Option(
        [],
        "--floor-u",
        metavar="[METRIC=]UNITS",
        help=(
            "Floor added to the allowed error, in units of the dtype's unit roundoff u; for every metric or "
            f"METRIC=UNITS (repeatable). Default {DEFAULT_FLOOR_U:g}."
        ),
    ),
    markdown: Path | None = typer.Option(
        None,
        "--markdown",
        help="Write a markdown summary here (for a CI comment or job summary).",
    ),
    junit: Path | None = typer.Option(
        None,
        "--junit",
        help="Write JUnit XML here: one test case per configuration.",
    ),
    update_baseline: bool = typer.Option(
        False,
        "--update-baseline",
        metavar="",
        help="When nothing regressed, replace the baseline's results with these.",
    ),
    allow_different_setup: bool = typer.Option(
        False,
        "--allow-different-setup",
        metavar="",
        help="Compare even when the manifests' setups (model, options, data, checkpoint, device, scaler) differ.",
    ),
) -> None:
    """Compare a sweep with a baseline, configuration by configuration: exit 0 if nothing regressed, 1 if something did
    or a float64 reference moved.

    A regression: a configuration that was ok and now fails, is skipped or is missing, or an error
    (sol, final, loss, grad_y0, grad_params) above FACTOR x baseline + FLOOR x u. A reference moved: its
    norms or its distance from the fine reference changed; its errors are then not compared.
    """
    check_command(CheckRequest(**locals()))  # the arguments and options as given, by name
