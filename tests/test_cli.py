"""Command-line conventions: --version, shell completion, a grouped --help that shows every default."""
from __future__ import annotations

import roundoff_analyzer

from .conftest import run_cli


def test_version():
    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"roundoff-analyzer {roundoff_analyzer.__version__}"


def test_completion_script_for_bash():
    result = run_cli("--show-completion", "bash")
    assert result.exit_code == 0 and "complete" in result.stdout and "roundoff" in result.stdout


def test_sweep_help_groups_the_options_and_shows_the_defaults(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    text = run_cli("sweep", "--help").stdout
    panels = [title for title in ("Model and data", "Grid", "Scaling", "Execution", "Output") if f"─ {title} ─" in text]
    assert panels == ["Model and data", "Grid", "Scaling", "Execution", "Output"]
    flat = " ".join(text.split())
    for default in ("[default: (8,32,128)]", "[default: (euler,rk4)]", "[default: (65536)]", "[default: (0.5)]", "[default: (30)]"):
        assert default in flat
    assert "seven (library, dtype, scaling) triples of the default grid" in flat and "seed 000" not in flat
    force = next(line for line in text.splitlines() if "--force" in line)
    assert "<bool>" not in force  # a flag takes no value
