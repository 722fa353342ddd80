"""`roundoff show` in 100 columns: no number cut, columns that say nothing named in the caption, and piped
output no wider than the table."""

from __future__ import annotations

import pytest

from roundoff_analyzer.commands.tables import COLUMNS, cell

from .conftest import results, run_cli


@pytest.mark.parametrize("fixture", ["tiny_sweep", "overflow_sweep"])
def test_show_fits_100_columns_without_cutting_a_number(fixture, request, monkeypatch):
    folder = request.getfixturevalue(fixture)
    monkeypatch.setenv("COLUMNS", "100")
    result = run_cli("show", folder)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "…" not in result.stdout
    table = results(folder)
    rows = iter(lines)
    for record in table.to_dict("records"):
        # Each configuration's row holds all its numbers, whole, in the order of the columns.
        numbers = [cell(record[column], fmt) for _, column, fmt in COLUMNS if fmt is not str]
        numbers = [n for n in numbers if n]
        line = next(
            line for line in rows if line.split()[:1] == [record["library"]] and all(n in line.split() for n in numbers)
        )
        assert line


def test_columns_that_say_nothing_are_named_in_the_caption(overflow_sweep, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = run_cli("show", overflow_sweep).stdout
    table = results(overflow_sweep)
    assert table["dtype"].nunique() == table["method"].nunique() == table["mode"].nunique() == 1
    caption = " ".join(out.split())
    assert "the same in every row: method euler, dtype float16, mode autocast" in caption
    header = next(line for line in out.splitlines() if "library" in line)
    assert "dtype" not in header and "method" not in header and "scaling" in header


def test_piped_output_stays_narrow(tiny_sweep, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run_cli("show", tiny_sweep).stdout
    assert max(len(line) for line in out.splitlines()) <= 100
